#pragma once
#include <cstdint>

// Defined once per backend: scale_cpu/scale.cpp and scale_cuda/scale.cu.
void scale_impl(const float* x, float* y, int64_t n, float s);
