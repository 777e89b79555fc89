#include <cuda_runtime.h>

#include "img2gray.h"

namespace {

// No FMA contraction: the result must match the PyTorch reference bit for bit.
__device__ __forceinline__ uint8_t luma(uint32_t r, uint32_t g, uint32_t b) {
  float v = __fadd_rn(__fmul_rn(IMG2GRAY_WR, static_cast<float>(r)),
                      __fmul_rn(IMG2GRAY_WG, static_cast<float>(g)));
  v = __fadd_rn(v, __fmul_rn(IMG2GRAY_WB, static_cast<float>(b)));
  return static_cast<uint8_t>(v);
}

__device__ __forceinline__ uint32_t byte_at(const uint4& v, int k) {
  const uint32_t w = k < 4 ? v.x : k < 8 ? v.y : k < 12 ? v.z : v.w;
  return (w >> (8 * (k & 3))) & 0xffu;
}

constexpr int kPixelsPerThread = 16;  // 48 bytes in (3 x 16 B), 16 bytes out
constexpr int kThreads = 256;

// Each thread converts 16 consecutive pixels with three 16-byte loads and one
// 16-byte store. The image is treated as a flat run of pixels, so any width
// works; the tail of fewer than 16 pixels goes through `img2gray_tail`.
__global__ void __launch_bounds__(kThreads)
img2gray_vec16(const uint4* __restrict__ rgb, uint4* __restrict__ gray, int64_t chunks) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < chunks;
       c += stride) {
    const uint4 a = __ldcs(rgb + 3 * c);
    const uint4 b = __ldcs(rgb + 3 * c + 1);
    const uint4 d = __ldcs(rgb + 3 * c + 2);
    uint32_t out[4];
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      uint32_t word = 0;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int p = 4 * w + j;  // pixel in chunk, bytes 3p .. 3p+2 of a|b|d
        uint32_t ch[3];
#pragma unroll
        for (int k = 0; k < 3; ++k) {
          const int byte = 3 * p + k;
          ch[k] = byte < 16 ? byte_at(a, byte) : byte < 32 ? byte_at(b, byte - 16) : byte_at(d, byte - 32);
        }
        word |= static_cast<uint32_t>(luma(ch[0], ch[1], ch[2])) << (8 * j);
      }
      out[w] = word;
    }
    __stcs(gray + c, make_uint4(out[0], out[1], out[2], out[3]));
  }
}

// One thread per pixel: used for the tail and for buffers that are not 16-byte aligned.
__global__ void img2gray_scalar(const uint8_t* __restrict__ rgb, uint8_t* __restrict__ gray,
                                int64_t begin, int64_t end) {
  const int64_t i = begin + blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < end) gray[i] = luma(rgb[3 * i], rgb[3 * i + 1], rgb[3 * i + 2]);
}

int blocks_for(int64_t work, int threads) {
  static int max_blocks = 0;
  if (max_blocks == 0) {
    int device = 0, sms = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    max_blocks = sms > 0 ? sms * 16 : 4096;
  }
  const int64_t needed = (work + threads - 1) / threads;
  return static_cast<int>(needed < max_blocks ? needed : max_blocks);
}

}  // namespace

int img2gray_cuda_launch(const uint8_t* rgb, uint8_t* gray, int64_t pixels, void* stream_ptr) {
  if (pixels <= 0) return 0;
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  const bool aligned = (reinterpret_cast<uintptr_t>(rgb) % 16 == 0) &&
                       (reinterpret_cast<uintptr_t>(gray) % 16 == 0);
  int64_t done = 0;
  if (aligned) {
    const int64_t chunks = pixels / kPixelsPerThread;
    if (chunks > 0) {
      img2gray_vec16<<<blocks_for(chunks, kThreads), kThreads, 0, stream>>>(
          reinterpret_cast<const uint4*>(rgb), reinterpret_cast<uint4*>(gray), chunks);
      done = chunks * kPixelsPerThread;
    }
  }
  const int64_t rest = pixels - done;
  if (rest > 0) {
    const int threads = 256;
    const int64_t blocks = (rest + threads - 1) / threads;
    img2gray_scalar<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(rgb, gray, done, pixels);
  }
  return static_cast<int>(cudaGetLastError());
}
