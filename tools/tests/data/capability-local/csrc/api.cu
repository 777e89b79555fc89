#include <cuda_runtime.h>

#include "api.h"

// Shared by both kernels: picks the implementation for the device at run time.
void scale_api(const float* x, float* y, int64_t n, float s) {
  int device = 0, major = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (major >= 10)
    scale_sm100(x, y, n, s);
  else
    scale_sm90(x, y, n, s);
}
