#pragma once
#include <cstdint>

void scale_api(const float* x, float* y, int64_t n, float s);  // csrc/api.cu
void scale_sm90(const float* x, float* y, int64_t n, float s);
void scale_sm100(const float* x, float* y, int64_t n, float s);
