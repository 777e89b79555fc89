#include <cuda_runtime.h>

#include "scale.h"

namespace {

__global__ void scale_hopper_kernel(const float* x, float* y, int64_t n, float s) {
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = x[i] * s;
}

}  // namespace

bool scale_hopper(const float* x, float* y, int64_t n, float s) {
  int device = 0, major = 0, minor = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (major != 9 || minor != 0) return false;
  if (n > 0) scale_hopper_kernel<<<(n + 255) / 256, 256>>>(x, y, n, s);
  return true;
}
