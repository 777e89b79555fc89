#include "scale.h"

void scale_cpu(const float* x, float* y, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s;
}

#define KB_STR_(...) #__VA_ARGS__
#define KB_STR(...) KB_STR_(__VA_ARGS__)

const char* kb_kernel_probe() { return KB_STR(KB_KERNEL_DOLLAR) "|" KB_STR(KB_GT) "|" KB_STR(KB_COMMA); }
