#include "api.h"

namespace {
__global__ void k(const float* x, float* y, int64_t n, float s) {
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = x[i] * s;
}
}  // namespace

void scale_sm90(const float* x, float* y, int64_t n, float s) {
  if (n > 0) k<<<(n + 255) / 256, 256>>>(x, y, n, s);
}
