#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "rms_norm.h"

namespace {

// Storage type <-> float32.
template <typename T>
struct Cvt;
template <>
struct Cvt<float> {
  static __device__ __forceinline__ float to(float x) { return x; }
  static __device__ __forceinline__ float from(float x) { return x; }
};
template <>
struct Cvt<__half> {
  static __device__ __forceinline__ float to(__half x) { return __half2float(x); }
  static __device__ __forceinline__ __half from(float x) { return __float2half_rn(x); }
};
template <>
struct Cvt<__nv_bfloat16> {
  static __device__ __forceinline__ float to(__nv_bfloat16 x) { return __bfloat162float(x); }
  static __device__ __forceinline__ __nv_bfloat16 from(float x) { return __float2bfloat16_rn(x); }
};

// N consecutive elements, moved with 16-byte accesses when they fill whole 16-byte words.
template <typename T, int N>
struct alignas(16) Pack {
  T v[N];
};
template <typename T, int N>
__device__ __forceinline__ void load(Pack<T, N>& p, const T* src) {
  if constexpr (N * sizeof(T) % 16 == 0) {
#pragma unroll
    for (int k = 0; k < static_cast<int>(N * sizeof(T) / 16); ++k)
      reinterpret_cast<uint4*>(p.v)[k] = reinterpret_cast<const uint4*>(src)[k];
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) p.v[k] = src[k];
  }
}
template <typename T, int N>
__device__ __forceinline__ void store(T* dst, const Pack<T, N>& p) {
  if constexpr (N * sizeof(T) % 16 == 0) {
#pragma unroll
    for (int k = 0; k < static_cast<int>(N * sizeof(T) / 16); ++k)
      reinterpret_cast<uint4*>(dst)[k] = reinterpret_cast<const uint4*>(p.v)[k];
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) dst[k] = p.v[k];
  }
}

// Sum of squares of a pack, in float32.
template <typename T, int N>
__device__ __forceinline__ float sum_sq(const Pack<T, N>& p) {
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < N; ++k) {
    const float f = Cvt<T>::to(p.v[k]);
    s = fmaf(f, f, s);
  }
  return s;
}

// y = round(w * round(x * rstd)), the rounding steps of transformers' LlamaRMSNorm.
template <typename T, typename W, int N>
__device__ __forceinline__ Pack<T, N> normalise(const Pack<T, N>& x, const Pack<W, N>& w,
                                                float rstd) {
  Pack<T, N> y;
#pragma unroll
  for (int k = 0; k < N; ++k) {
    const float normed = Cvt<T>::to(Cvt<T>::from(__fmul_rn(Cvt<T>::to(x.v[k]), rstd)));
    y.v[k] = Cvt<T>::from(__fmul_rn(Cvt<W>::to(w.v[k]), normed));
  }
  return y;
}

// rsqrt(mean + eps) with the mean as sum * (1/n), rounded step by step as PyTorch's
// x.pow(2).mean(-1) + eps and torch.rsqrt (rsqrtf) are.
__device__ __forceinline__ float inv_rms(float sum, float inv_n, float eps) {
  return rsqrtf(__fadd_rn(__fmul_rn(sum, inv_n), eps));
}

// Sum of `v` over the blockDim.x threads of this thread's row (blockDim.x a power of two).
// Every thread of the block must call it.
__device__ __forceinline__ float row_sum(float v) {
  __shared__ float partial[32];
  const int width = blockDim.x < 32 ? blockDim.x : 32;
  for (int off = width / 2; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  if (blockDim.x <= 32) return v;
  const int warps = blockDim.x / 32;  // per row; at most 32 warps per block
  float* row_partial = partial + threadIdx.y * warps;
  if ((threadIdx.x & 31) == 0) row_partial[threadIdx.x / 32] = v;
  __syncthreads();
  float s = 0.f;
  for (int k = 0; k < warps; ++k) s += row_partial[k];
  return s;
}

// The row stays in registers: blockDim.x threads per row hold P packs of VEC elements each
// (pack j of the row in thread j % blockDim.x), blockDim.y rows per block. One read of x and
// one write of y per element; the weight is read from L2/L1.
template <typename T, typename W, int VEC, int P>
__global__ void __launch_bounds__(P == 8 ? 512 : 256)
rms_norm_rows(T* __restrict__ out, const T* __restrict__ x, const W* __restrict__ w,
              int64_t rows, int n, int64_t x_stride, float inv_n, float eps) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool active = row < rows;
  const int packs = n / VEC;
  const T* xr = x + row * x_stride;
  Pack<T, VEC> v[P];
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < P; ++k) {
    const int j = threadIdx.x + k * blockDim.x;
    if (active && j < packs) {
      load(v[k], xr + static_cast<int64_t>(j) * VEC);
      ss += sum_sq(v[k]);
    }
  }
  const float rstd = inv_rms(row_sum(ss), inv_n, eps);
  if (!active) return;
  T* yr = out + row * n;
#pragma unroll
  for (int k = 0; k < P; ++k) {
    const int j = threadIdx.x + k * blockDim.x;
    if (j < packs) {
      Pack<W, VEC> wv;
      load(wv, w + static_cast<int64_t>(j) * VEC);
      store(yr + static_cast<int64_t>(j) * VEC, normalise(v[k], wv, rstd));
    }
  }
}

// Any row length: one block per row, two passes over the row (the second mostly from L2).
template <typename T, typename W, int VEC>
__global__ void __launch_bounds__(1024)
rms_norm_looped(T* __restrict__ out, const T* __restrict__ x, const W* __restrict__ w,
                int64_t rows, int64_t n, int64_t x_stride, float inv_n, float eps) {
  const int64_t row = blockIdx.x;
  const int64_t packs = n / VEC;
  const T* xr = x + row * x_stride;
  float ss = 0.f;
  for (int64_t j = threadIdx.x; j < packs; j += blockDim.x) {
    Pack<T, VEC> v;
    load(v, xr + j * VEC);
    ss += sum_sq(v);
  }
  const float rstd = inv_rms(row_sum(ss), inv_n, eps);
  T* yr = out + row * n;
  for (int64_t j = threadIdx.x; j < packs; j += blockDim.x) {
    Pack<T, VEC> v;
    Pack<W, VEC> wv;
    load(v, xr + j * VEC);
    load(wv, w + j * VEC);
    store(yr + j * VEC, normalise(v, wv, rstd));
  }
}

int next_pow2(int64_t v) {
  int p = 1;
  while (p < v) p *= 2;
  return p;
}

template <typename T, typename W, int VEC, int P>
void launch_rows(T* out, const T* x, const W* w, const RmsShape& s, int64_t packs, float inv_n,
                 float eps, cudaStream_t stream) {
  int tpr = next_pow2((packs + P - 1) / P);
  const int threads = tpr > 256 ? tpr : 256;
  const int rows_per_block = threads / tpr;
  const int64_t blocks = (s.rows + rows_per_block - 1) / rows_per_block;
  rms_norm_rows<T, W, VEC, P><<<static_cast<unsigned>(blocks), dim3(tpr, rows_per_block), 0,
                                 stream>>>(out, x, w, s.rows, static_cast<int>(s.n), s.x_stride,
                                           inv_n, eps);
}

template <typename T, typename W, int VEC>
void launch_looped(T* out, const T* x, const W* w, const RmsShape& s, float inv_n, float eps,
                   cudaStream_t stream) {
  const int64_t packs = s.n / VEC;
  const int threads = packs >= 1024 ? 1024 : (packs > 32 ? next_pow2(packs) : 32);
  rms_norm_looped<T, W, VEC><<<static_cast<unsigned>(s.rows), threads, 0, stream>>>(
      out, x, w, s.rows, s.n, s.x_stride, inv_n, eps);
}

template <typename T, typename W>
void launch(void* out_, const void* x_, const void* w_, const RmsShape& s, float inv_n,
            float eps, cudaStream_t stream) {
  T* out = static_cast<T*>(out_);
  const T* x = static_cast<const T*>(x_);
  const W* w = static_cast<const W*>(w_);
  constexpr int kVec = 16 / sizeof(T);
  const bool aligned = reinterpret_cast<uintptr_t>(out) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(w) % 16 == 0;
  if (!(aligned && s.n % kVec == 0 && s.x_stride % kVec == 0)) {
    launch_looped<T, W, 1>(out, x, w, s, inv_n, eps, stream);
    return;
  }
  // Packs per thread: the fewest that keep a row within 256 threads (512 for P = 8); longer
  // rows take two passes.
  const int64_t packs = s.n / kVec;
  if (packs <= 256) {
    launch_rows<T, W, kVec, 1>(out, x, w, s, packs, inv_n, eps, stream);
  } else if (packs <= 512) {
    launch_rows<T, W, kVec, 2>(out, x, w, s, packs, inv_n, eps, stream);
  } else if (packs <= 1024) {
    launch_rows<T, W, kVec, 4>(out, x, w, s, packs, inv_n, eps, stream);
  } else if (packs <= 4096) {
    launch_rows<T, W, kVec, 8>(out, x, w, s, packs, inv_n, eps, stream);
  } else {
    launch_looped<T, W, kVec>(out, x, w, s, inv_n, eps, stream);
  }
}

}  // namespace

int rms_norm_cuda_launch(int dtype, int weight_dtype, void* out, const void* x,
                         const void* weight, RmsShape shape, float inv_n, float eps,
                         void* stream_ptr) {
  if (shape.rows <= 0 || shape.n <= 0) return 0;
  if (shape.rows > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  const bool wf = weight_dtype == RMS_FLOAT32;
  if (!wf && weight_dtype != dtype) return static_cast<int>(cudaErrorInvalidValue);
  switch (dtype) {
    case RMS_FLOAT32:
      launch<float, float>(out, x, weight, shape, inv_n, eps, stream);
      break;
    case RMS_FLOAT16:
      if (wf) launch<__half, float>(out, x, weight, shape, inv_n, eps, stream);
      else launch<__half, __half>(out, x, weight, shape, inv_n, eps, stream);
      break;
    case RMS_BFLOAT16:
      if (wf) launch<__nv_bfloat16, float>(out, x, weight, shape, inv_n, eps, stream);
      else launch<__nv_bfloat16, __nv_bfloat16>(out, x, weight, shape, inv_n, eps, stream);
      break;
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
  return static_cast<int>(cudaGetLastError());
}
