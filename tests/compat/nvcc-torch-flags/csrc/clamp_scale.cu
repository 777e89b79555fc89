#if !defined(USE_CUDA) || !defined(CUDA_KERNEL) || !defined(ENABLE_FP8)
#error "CUDA sources are compiled with USE_CUDA, CUDA_KERNEL and ENABLE_FP8 (as upstream)"
#endif
#include <algorithm>

#include "clamp_scale.h"

namespace {

template <typename F>
__global__ void apply(const float* x, float* y, int64_t n, F f) {
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = f(x[i]);
}

}  // namespace

void clamp_scale(const float* x, float* y, int64_t n, float s, float hi) {
  // std::min is a constexpr __host__ function: device code may call it only with
  // --expt-relaxed-constexpr; the __device__ lambda needs --expt-extended-lambda.
  auto f = [s, hi] __device__(float v) { return std::min(v * s, hi); };
  if (n > 0) apply<<<(n + 255) / 256, 256>>>(x, y, n, f);
}
