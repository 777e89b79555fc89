#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "activation.h"

namespace {

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

// All math in float32, rounded once to the storage type (as PyTorch does).
struct GeluFast {
  __device__ __forceinline__ float operator()(float x) const {
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * x * (1.0f + 0.044715f * x * x)));
  }
};
struct GeluTanh {
  __device__ __forceinline__ float operator()(float x) const {
    const float inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(inner));
  }
};
struct Gelu {
  __device__ __forceinline__ float operator()(float x) const {
    return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
  }
};
__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

// VEC elements moved with one load/store (16 bytes when VEC = 16 / sizeof(T)).
template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Pack {
  T v[VEC];
};

constexpr int kThreads = 256;

// Grid-stride loop over the rows * d / VEC packs of the output.
template <typename T, typename Op, int VEC>
__global__ void __launch_bounds__(kThreads)
unary_kernel(T* out, const T* in, int64_t rows, int64_t d, int64_t out_stride, int64_t in_stride) {
  const int64_t per_row = d / VEC;
  const int64_t total = rows * per_row;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const Op op;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += step) {
    const int64_t r = rows == 1 ? 0 : i / per_row;
    const int64_t c = (i - r * per_row) * VEC;
    Pack<T, VEC> p = *reinterpret_cast<const Pack<T, VEC>*>(in + r * in_stride + c);
#pragma unroll
    for (int k = 0; k < VEC; ++k) p.v[k] = Cvt<T>::from(op(Cvt<T>::to(p.v[k])));
    *reinterpret_cast<Pack<T, VEC>*>(out + r * out_stride + c) = p;
  }
}

// silu(gate) is rounded to T before the product, like F.silu(gate) * up.
template <typename T, int VEC>
__global__ void __launch_bounds__(kThreads)
silu_and_mul_kernel(T* out, const T* in, int64_t rows, int64_t d, int64_t out_stride,
                    int64_t in_stride) {
  const int64_t per_row = d / VEC;
  const int64_t total = rows * per_row;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += step) {
    const int64_t r = rows == 1 ? 0 : i / per_row;
    const int64_t c = (i - r * per_row) * VEC;
    const T* gate = in + r * in_stride + c;
    const Pack<T, VEC> g = *reinterpret_cast<const Pack<T, VEC>*>(gate);
    const Pack<T, VEC> u = *reinterpret_cast<const Pack<T, VEC>*>(gate + d);
    Pack<T, VEC> o;
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const float s = Cvt<T>::to(Cvt<T>::from(silu(Cvt<T>::to(g.v[k]))));
      o.v[k] = Cvt<T>::from(s * Cvt<T>::to(u.v[k]));
    }
    *reinterpret_cast<Pack<T, VEC>*>(out + r * out_stride + c) = o;
  }
}

unsigned blocks_for(int64_t work) {
  static int max_blocks[64] = {};
  int device = 0;
  cudaGetDevice(&device);
  int& cached = max_blocks[device & 63];
  if (cached == 0) {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    cached = sms > 0 ? sms * 8 : 1024;
  }
  const int64_t needed = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(needed < cached ? needed : cached);
}

template <typename T, int VEC>
void launch_vec(int kind, T* out, const T* in, const ActShape& s, cudaStream_t stream) {
  const int64_t work = s.rows * (s.d / VEC);
  if (work == 0) return;
  const unsigned blocks = blocks_for(work);
  switch (kind) {
    case ACT_GELU_FAST:
      unary_kernel<T, GeluFast, VEC><<<blocks, kThreads, 0, stream>>>(out, in, s.rows, s.d,
                                                                      s.out_stride, s.in_stride);
      break;
    case ACT_GELU_TANH:
      unary_kernel<T, GeluTanh, VEC><<<blocks, kThreads, 0, stream>>>(out, in, s.rows, s.d,
                                                                      s.out_stride, s.in_stride);
      break;
    case ACT_GELU:
      unary_kernel<T, Gelu, VEC><<<blocks, kThreads, 0, stream>>>(out, in, s.rows, s.d,
                                                                  s.out_stride, s.in_stride);
      break;
    case ACT_SILU_AND_MUL:
      silu_and_mul_kernel<T, VEC><<<blocks, kThreads, 0, stream>>>(out, in, s.rows, s.d,
                                                                   s.out_stride, s.in_stride);
      break;
  }
}

template <typename T>
void launch(int kind, void* out, const void* in, const ActShape& s, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const bool aligned = reinterpret_cast<uintptr_t>(out) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(in) % 16 == 0;
  const bool vec = aligned && s.d % kVec == 0 && s.out_stride % kVec == 0 &&
                   s.in_stride % kVec == 0;
  if (vec) {
    launch_vec<T, kVec>(kind, static_cast<T*>(out), static_cast<const T*>(in), s, stream);
  } else {
    launch_vec<T, 1>(kind, static_cast<T*>(out), static_cast<const T*>(in), s, stream);
  }
}

}  // namespace

int activation_cuda_launch(int kind, int dtype, void* out, const void* in, ActShape shape,
                           void* stream_ptr) {
  if (kind < ACT_GELU_FAST || kind > ACT_SILU_AND_MUL) return static_cast<int>(cudaErrorInvalidValue);
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  switch (dtype) {
    case ACT_FLOAT32: launch<float>(kind, out, in, shape, stream); break;
    case ACT_FLOAT16: launch<__half>(kind, out, in, shape, stream); break;
    case ACT_BFLOAT16: launch<__nv_bfloat16>(kind, out, in, shape, stream); break;
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
  return static_cast<int>(cudaGetLastError());
}
