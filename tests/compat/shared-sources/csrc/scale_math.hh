// Shared by the CPU, CUDA and ROCm kernels.
#pragma once

#if defined(__CUDACC__) || defined(__HIPCC__)
#define KB_HOST_DEVICE __host__ __device__
#else
#define KB_HOST_DEVICE
#endif

KB_HOST_DEVICE inline float scaled(float x, float s) {
  return x * s * (
#include "factor.inc"
  );
}
