#include "../scale.h"

void scale_impl(const float* x, float* y, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s;
}
