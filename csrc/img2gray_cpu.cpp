#include "img2gray.h"

// Plain loop over packed pixels; GCC vectorises it at -O3 (the binding splits
// the range across threads). The expression order matches the PyTorch
// reference so results are bit-exact: ((wr*R + wg*G) + wb*B), truncated.
void img2gray_cpu_range(const uint8_t* __restrict rgb, uint8_t* __restrict gray,
                        int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const uint8_t* p = rgb + 3 * i;
    float v = IMG2GRAY_WR * static_cast<float>(p[0]) + IMG2GRAY_WG * static_cast<float>(p[1]);
    v = v + IMG2GRAY_WB * static_cast<float>(p[2]);
    gray[i] = static_cast<uint8_t>(v);
  }
}
