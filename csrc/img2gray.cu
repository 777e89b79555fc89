#include <cuda_runtime.h>

#include "img2gray.h"

namespace {

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

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kPixels = 16;              // per thread and step: 48 bytes in, 16 out
constexpr int kGroup = 32 * kPixels;     // pixels per warp group
#ifndef IMG2GRAY_UNROLL
#define IMG2GRAY_UNROLL 2
#endif
constexpr int kUnroll = IMG2GRAY_UNROLL;  // groups per warp and step (tuning knob)

// The image is a flat run of pixels, so any width works. Each warp converts 512 pixels per
// step: it reads their 1536 bytes with three fully coalesced 16-byte loads per thread, passes
// them through shared memory so that each thread holds its own 16 pixels, and writes 512
// coalesced bytes. The last < 512 pixels are done by the first threads of the grid, one
// pixel each, in the same launch.
__global__ void __launch_bounds__(kThreads)
img2gray_kernel(const uint8_t* __restrict__ rgb, uint8_t* __restrict__ gray, int64_t pixels) {
  __shared__ uint4 tile[kWarps][96];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int64_t groups = pixels / kGroup;
  const uint4* in = reinterpret_cast<const uint4*>(rgb);
  uint4* out = reinterpret_cast<uint4*>(gray);
  uint4* t = tile[warp];
  // kUnroll groups per step: all their loads are issued before the first is used.
  for (int64_t g0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * kUnroll; g0 < groups;
       g0 += static_cast<int64_t>(gridDim.x) * kWarps * kUnroll) {
    uint4 v[kUnroll][3];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (g0 + u < groups) {  // warp-uniform
        const uint4* src = in + (g0 + u) * 96;
        v[u][0] = __ldcs(src + lane);
        v[u][1] = __ldcs(src + 32 + lane);
        v[u][2] = __ldcs(src + 64 + lane);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (g0 + u < groups) {
        t[lane] = v[u][0];
        t[32 + lane] = v[u][1];
        t[64 + lane] = v[u][2];
        __syncwarp();
        const uint4 p0 = t[3 * lane], p1 = t[3 * lane + 1], p2 = t[3 * lane + 2];
        __syncwarp();
        __stcs(out + (g0 + u) * 32 + lane, convert16(p0, p1, p2));
      }
    }
  }
  const int64_t i = groups * kGroup + static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i < pixels) gray[i] = static_cast<uint8_t>(luma(rgb[3 * i], rgb[3 * i + 1], rgb[3 * i + 2]));
}

// Any alignment: one thread per pixel (sub-tensors that start off a 16-byte boundary).
__global__ void img2gray_unaligned(const uint8_t* __restrict__ rgb, uint8_t* __restrict__ gray,
                                   int64_t pixels) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < pixels) gray[i] = static_cast<uint8_t>(luma(rgb[3 * i], rgb[3 * i + 1], rgb[3 * i + 2]));
}

}  // namespace

int img2gray_cuda_launch(const uint8_t* rgb, uint8_t* gray, int64_t pixels, void* stream_ptr) {
  if (pixels <= 0) return 0;
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  const bool aligned = (reinterpret_cast<uintptr_t>(rgb) % 16 == 0) &&
                       (reinterpret_cast<uintptr_t>(gray) % 16 == 0);
  if (aligned) {
    const int64_t groups = pixels / kGroup;
    const int64_t tail_blocks = (pixels - groups * kGroup + kThreads - 1) / kThreads;
    // One step per warp (no grid-stride tail imbalance); at least enough blocks for the tail.
    int64_t blocks = (groups + kWarps * kUnroll - 1) / (kWarps * kUnroll);
    blocks = blocks > tail_blocks ? blocks : tail_blocks;
    img2gray_kernel<<<static_cast<unsigned>(blocks > 0 ? blocks : 1), kThreads, 0, stream>>>(
        rgb, gray, pixels);
  } else {
    const int64_t blocks = (pixels + kThreads - 1) / kThreads;
    img2gray_unaligned<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(rgb, gray, pixels);
  }
  return static_cast<int>(cudaGetLastError());
}
