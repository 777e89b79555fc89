// Device-side conversion helpers of the CUDA kernel (also used by gpu/tune's design sweep).
#pragma once
#include <cstdint>

#include "img2gray.h"

namespace img2gray_detail {

// No FMA contraction: the result must match the PyTorch reference bit for bit.
__device__ __forceinline__ uint32_t luma(uint32_t r, uint32_t g, uint32_t b) {
  float v = __fadd_rn(__fmul_rn(IMG2GRAY_WR, static_cast<float>(r)),
                      __fmul_rn(IMG2GRAY_WG, static_cast<float>(g)));
  v = __fadd_rn(v, __fmul_rn(IMG2GRAY_WB, static_cast<float>(b)));
  return static_cast<uint32_t>(v);
}

__device__ __forceinline__ uint32_t byte_of(const uint4& a, const uint4& b, const uint4& c, int i) {
  const uint4& v = i < 16 ? a : i < 32 ? b : c;
  const int k = i & 15;
  const uint32_t w = k < 4 ? v.x : k < 8 ? v.y : k < 12 ? v.z : v.w;
  return (w >> (8 * (k & 3))) & 0xffu;
}

// 16 packed RGB pixels (48 bytes in three uint4) -> 16 gray bytes.
__device__ __forceinline__ uint4 convert16(const uint4& a, const uint4& b, const uint4& c) {
  uint32_t out[4];
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    uint32_t word = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int p = 3 * (4 * w + j);
      word |= luma(byte_of(a, b, c, p), byte_of(a, b, c, p + 1), byte_of(a, b, c, p + 2)) << (8 * j);
    }
    out[w] = word;
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

}  // namespace img2gray_detail
