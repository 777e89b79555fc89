#pragma once
#include <cstdint>

void scale_cpu(const float* x, float* y, int64_t n, float s);
