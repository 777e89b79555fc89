#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

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

// All math in float32, rounded once to the storage type (as PyTorch does). For half and
// bfloat16 outputs the transcendental functions use fast forms whose error (< 1e-6 relative
// in tanh/exp, 1.5e-7 absolute in erf) is far below the output's rounding; float32 outputs
// keep the libm functions.
template <bool kFast>
__device__ __forceinline__ float tanh_f(float x) {
  if constexpr (kFast) {
    return 1.0f - __fdividef(2.0f, __expf(2.0f * x) + 1.0f);
  } else {
    return tanhf(x);
  }
}
template <bool kFast>
__device__ __forceinline__ float erf_f(float x) {
  if constexpr (kFast) {
    // Abramowitz & Stegun 7.1.26.
    const float ax = fabsf(x);
    const float t = __fdividef(1.0f, 1.0f + 0.3275911f * ax);
    const float poly = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f +
                       t * (-1.453152027f + t * 1.061405429f))));
    const float y = 1.0f - poly * __expf(-ax * ax);
    return copysignf(y, x);
  } else {
    return erff(x);
  }
}
template <bool kFast>
struct GeluFast {
  __device__ __forceinline__ float operator()(float x) const {
    return 0.5f * x * (1.0f + tanh_f<kFast>(0.7978845608028654f * x * (1.0f + 0.044715f * x * x)));
  }
};
template <bool kFast>
struct GeluTanh {
  __device__ __forceinline__ float operator()(float x) const {
    const float inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanh_f<kFast>(inner));
  }
};
template <bool kFast>
struct Gelu {
  __device__ __forceinline__ float operator()(float x) const {
    return 0.5f * x * (1.0f + erf_f<kFast>(x * 0.7071067811865476f));
  }
};
template <bool kFast>
__device__ __forceinline__ float silu(float x) {
  if constexpr (kFast) {
    return __fdividef(x, 1.0f + __expf(-x));
  } else {
    return x / (1.0f + expf(-x));
  }
}

// VEC elements moved with one load/store (16 bytes when VEC = 16 / sizeof(T)).
template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Pack {
  T v[VEC];
};

constexpr int kThreads = 256;

// Rows go over gridDim.y, the VEC-element packs of a row over gridDim.x (both grid-stride),
// so no per-element division is needed. Contiguous unary inputs arrive as one long row.
template <typename T, typename Op, int VEC>
__global__ void __launch_bounds__(kThreads)
unary_kernel(T* out, const T* in, int64_t rows, int64_t d, int64_t out_stride, int64_t in_stride) {
  const int64_t per_row = d / VEC;
  const Op op;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const T* src = in + r * in_stride;
    T* dst = out + r * out_stride;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < per_row;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      Pack<T, VEC> p = *reinterpret_cast<const Pack<T, VEC>*>(src + i * VEC);
#pragma unroll
      for (int k = 0; k < VEC; ++k) p.v[k] = Cvt<T>::from(op(Cvt<T>::to(p.v[k])));
      *reinterpret_cast<Pack<T, VEC>*>(dst + i * VEC) = p;
    }
  }
}

// silu(gate) is rounded to T before the product, like F.silu(gate) * up.
template <typename T, int VEC>
__global__ void __launch_bounds__(kThreads)
silu_and_mul_kernel(T* out, const T* in, int64_t rows, int64_t d, int64_t out_stride,
                    int64_t in_stride) {
  constexpr bool kFast = !std::is_same<T, float>::value;
  const int64_t per_row = d / VEC;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const T* gate = in + r * in_stride;
    T* dst = out + r * out_stride;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < per_row;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const Pack<T, VEC> g = *reinterpret_cast<const Pack<T, VEC>*>(gate + i * VEC);
      const Pack<T, VEC> u = *reinterpret_cast<const Pack<T, VEC>*>(gate + d + i * VEC);
      Pack<T, VEC> o;
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const float s = Cvt<T>::to(Cvt<T>::from(silu<kFast>(Cvt<T>::to(g.v[k]))));
        o.v[k] = Cvt<T>::from(s * Cvt<T>::to(u.v[k]));
      }
      *reinterpret_cast<Pack<T, VEC>*>(dst + i * VEC) = o;
    }
  }
}

int max_blocks() {
  static int cached[64] = {};
  int device = 0;
  cudaGetDevice(&device);
  int& blocks = cached[device & 63];
  if (blocks == 0) {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    blocks = sms > 0 ? sms * 8 : 1024;  // 8 x 256 threads: a full SM
  }
  return blocks;
}

// Enough blocks to fill the GPU once: x covers a row's packs, y the rows.
dim3 grid_for(int64_t rows, int64_t per_row) {
  const int64_t budget = max_blocks();
  int64_t x = (per_row + kThreads - 1) / kThreads;
  x = x < budget ? x : budget;
  int64_t y = budget / x;
  y = y < 1 ? 1 : y;
  y = y < rows ? y : rows;
  y = y < 65535 ? y : 65535;
  return dim3(static_cast<unsigned>(x), static_cast<unsigned>(y));
}

template <typename T, int VEC>
void launch_vec(int kind, T* out, const T* in, ActShape s, cudaStream_t stream) {
  if (s.rows == 0 || s.d / VEC == 0) return;
  constexpr bool kFast = !std::is_same<T, float>::value;
  if (kind != ACT_SILU_AND_MUL && s.in_stride == s.d && s.out_stride == s.d) {
    s.d *= s.rows;  // contiguous: one long row
    s.in_stride = s.out_stride = s.d;
    s.rows = 1;
  }
  const dim3 grid = grid_for(s.rows, s.d / VEC);
  switch (kind) {
    case ACT_GELU_FAST:
      unary_kernel<T, GeluFast<kFast>, VEC><<<grid, kThreads, 0, stream>>>(
          out, in, s.rows, s.d, s.out_stride, s.in_stride);
      break;
    case ACT_GELU_TANH:
      unary_kernel<T, GeluTanh<kFast>, VEC><<<grid, kThreads, 0, stream>>>(
          out, in, s.rows, s.d, s.out_stride, s.in_stride);
      break;
    case ACT_GELU:
      unary_kernel<T, Gelu<kFast>, VEC><<<grid, kThreads, 0, stream>>>(
          out, in, s.rows, s.d, s.out_stride, s.in_stride);
      break;
    case ACT_SILU_AND_MUL:
      silu_and_mul_kernel<T, VEC><<<grid, kThreads, 0, stream>>>(out, in, s.rows, s.d,
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
