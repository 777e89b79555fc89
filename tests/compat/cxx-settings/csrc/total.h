#pragma once
#include <cstdint>

float total(const float* x, int64_t n);
