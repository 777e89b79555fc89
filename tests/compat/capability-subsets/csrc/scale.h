#pragma once
#include <cstdint>

void scale_any(const float* x, float* y, int64_t n, float s);
// Returns false (and does nothing) on a device that is not capability 9.0.
bool scale_hopper(const float* x, float* y, int64_t n, float s);
