#pragma once
#include <cstdint>

// y = float(half(x)) with CUTLASS's numeric converter; returns CUTLASS's version as MMmmpp.
int round_half(const float* x, float* y, int64_t n);
