#pragma once
#include <cstdint>

void clamp_scale(const float* x, float* y, int64_t n, float s, float hi);
