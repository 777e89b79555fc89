#include <torch/headeronly/util/Exception.h>  // stable: fine under TORCH_TARGET_VERSION

#include "scale.h"

namespace {

__global__ void scale_kernel(const float* x, float* y, int64_t n, float s) {
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = x[i] * s;
}

}  // namespace

void scale_impl(const float* x, float* y, int64_t n, float s) {
  STD_TORCH_CHECK(n >= 0, "negative size");
  if (n > 0) scale_kernel<<<(n + 255) / 256, 256>>>(x, y, n, s);
}
