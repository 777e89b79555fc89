#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "activation.h"
#include "activation_math.cuh"

namespace {

// Storage type <-> float32. The 16-bit types also convert two elements at a time (one 32-bit
// word, element 0 in the low half): one instruction each way instead of two.
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
  static __device__ __forceinline__ float2 to2(uint32_t w) {
    return __half22float2(*reinterpret_cast<const __half2*>(&w));
  }
  static __device__ __forceinline__ uint32_t from2(float a, float b) {
    const __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
};
template <>
struct Cvt<__nv_bfloat16> {
  static __device__ __forceinline__ float to(__nv_bfloat16 x) { return __bfloat162float(x); }
  static __device__ __forceinline__ __nv_bfloat16 from(float x) { return __float2bfloat16_rn(x); }
  static __device__ __forceinline__ float2 to2(uint32_t w) {  // bfloat16 = upper half of a float
    return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
  }
  static __device__ __forceinline__ uint32_t from2(float a, float b) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
};

using activation_math::Gelu;
using activation_math::GeluFast;
using activation_math::GeluTanh;
using activation_math::silu;

// VEC elements moved with one load/store (16 bytes when VEC = 16 / sizeof(T)).
template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Pack {
  T v[VEC];
};

constexpr int kThreads = 512;
// Packs per thread and input, all loaded before the first is used: two 16-byte loads in flight
// per thread for both kernels, within 32 registers (4 blocks of 512 threads per SM).
constexpr int kUnaryUnroll = 2;
constexpr int kGatedUnroll = 1;

// One pass, no grid-stride loop over a row (measured on an H200 with gpu/tune: the best at
// 2^20..2^28 elements). A block is blockDim.y rows by blockDim.x * U packs of a row;
// blockIdx.x walks the row's packs, blockIdx.y the rows (grid-stride only past 65535 row
// blocks). Contiguous unary inputs arrive as one long row. `load(r, i, u)` fetches pack i of
// row r into slot u < U; `store(r, i, u)` computes and writes it once every slot is loaded.
template <int VEC, int U, typename Load, typename Store>
__device__ __forceinline__ void for_each_pack(int64_t rows, int64_t d, Load load, Store store) {
  const int64_t per_row = d / VEC;
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) * U + threadIdx.x;
  for (int64_t r = blockIdx.y * static_cast<int64_t>(blockDim.y) + threadIdx.y; r < rows;
       r += static_cast<int64_t>(gridDim.y) * blockDim.y) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t i = first + u * static_cast<int64_t>(blockDim.x);
      if (i < per_row) load(r, i, u);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t i = first + u * static_cast<int64_t>(blockDim.x);
      if (i < per_row) store(r, i, u);
    }
  }
}

// f applied to every element (float32 math, one rounding to T per result); f2 to every pair of
// elements at the same position in a and b.
template <typename T, int VEC, typename F>
__device__ __forceinline__ Pack<T, VEC> map_pack(const Pack<T, VEC>& a, F f) {
  Pack<T, VEC> out;
  if constexpr (sizeof(T) == 2 && VEC % 2 == 0) {
    const uint32_t* w = reinterpret_cast<const uint32_t*>(a.v);
    uint32_t* o = reinterpret_cast<uint32_t*>(out.v);
#pragma unroll
    for (int k = 0; k < VEC / 2; ++k) {
      const float2 x = Cvt<T>::to2(w[k]);
      o[k] = Cvt<T>::from2(f(x.x), f(x.y));
    }
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k) out.v[k] = Cvt<T>::from(f(Cvt<T>::to(a.v[k])));
  }
  return out;
}
template <typename T, int VEC, typename F>
__device__ __forceinline__ Pack<T, VEC> map_pack(const Pack<T, VEC>& a, const Pack<T, VEC>& b,
                                                 F f2) {
  Pack<T, VEC> out;
  if constexpr (sizeof(T) == 2 && VEC % 2 == 0) {
    const uint32_t* wa = reinterpret_cast<const uint32_t*>(a.v);
    const uint32_t* wb = reinterpret_cast<const uint32_t*>(b.v);
    uint32_t* o = reinterpret_cast<uint32_t*>(out.v);
#pragma unroll
    for (int k = 0; k < VEC / 2; ++k) {
      const float2 x = Cvt<T>::to2(wa[k]), y = Cvt<T>::to2(wb[k]);
      o[k] = Cvt<T>::from2(f2(x.x, y.x), f2(x.y, y.y));
    }
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k)
      out.v[k] = Cvt<T>::from(f2(Cvt<T>::to(a.v[k]), Cvt<T>::to(b.v[k])));
  }
  return out;
}

// 16-byte packs move as one uint4: a single 128-bit load or store.
template <typename T, int VEC>
__device__ __forceinline__ Pack<T, VEC> load_pack(const T* p) {
  Pack<T, VEC> v;
  if constexpr (sizeof(v) == 16) {
    *reinterpret_cast<uint4*>(&v) = *reinterpret_cast<const uint4*>(p);
  } else {
    v = *reinterpret_cast<const Pack<T, VEC>*>(p);
  }
  return v;
}
template <typename T, int VEC>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, VEC>& v) {
  if constexpr (sizeof(v) == 16) {
    // An explicit vector store: a plain struct store is split into four 32-bit stores, which
    // cost up to 40% of the bandwidth when they reach the L2 apart (measured on an H200).
    const uint32_t* w = reinterpret_cast<const uint32_t*>(&v);
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};"
                 :
                 : "l"(__cvta_generic_to_global(p)), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
                 : "memory");
  } else {
    *reinterpret_cast<Pack<T, VEC>*>(p) = v;
  }
}

template <typename T, typename Op, int VEC>
__global__ void __launch_bounds__(kThreads, 4)
unary_kernel(T* out, const T* in, int64_t rows, int64_t d, int64_t out_stride, int64_t in_stride) {
  const Op op;
  Pack<T, VEC> p[kUnaryUnroll];
  for_each_pack<VEC, kUnaryUnroll>(
      rows, d,
      [&](int64_t r, int64_t i, int u) { p[u] = load_pack<T, VEC>(in + r * in_stride + i * VEC); },
      [&](int64_t r, int64_t i, int u) {
        store_pack<T, VEC>(out + r * out_stride + i * VEC, map_pack(p[u], op));
      });
}

// silu(gate) is rounded to T before the product, like F.silu(gate) * up, and computed with
// PyTorch's own formula (x / (1 + expf(-x)), no approximate instructions), so the result is
// bit-identical to F.silu(gate) * up: a model's generated tokens do not change.
template <typename T, int VEC>
__global__ void __launch_bounds__(kThreads, std::is_same<T, float>::value ? 3 : 4)
silu_and_mul_kernel(T* out, const T* in, int64_t rows, int64_t d, int64_t out_stride,
                    int64_t in_stride) {
  Pack<T, VEC> g[kGatedUnroll], up[kGatedUnroll];
  for_each_pack<VEC, kGatedUnroll>(
      rows, d,
      [&](int64_t r, int64_t i, int u) {
        g[u] = load_pack<T, VEC>(in + r * in_stride + i * VEC);
        up[u] = load_pack<T, VEC>(in + r * in_stride + d + i * VEC);
      },
      [&](int64_t r, int64_t i, int u) {
        const Pack<T, VEC> s = map_pack(g[u], [](float x) { return silu<false>(x); });
        store_pack<T, VEC>(out + r * out_stride + i * VEC,
                           map_pack(s, up[u], [](float a, float b) { return a * b; }));
      });
}

struct Launch {
  dim3 grid, block;
};

// Threads along a row: the smallest power of two (>= 32) that covers it in one block pass,
// at most kThreads; the rest of the block takes further rows.
template <int U>
Launch launch_for(int64_t rows, int64_t per_row) {
  int64_t tx = 32;
  while (tx < kThreads && tx * U < per_row) tx *= 2;
  const int64_t ty = kThreads / tx;
  const int64_t gx = (per_row + tx * U - 1) / (tx * U);
  int64_t gy = (rows + ty - 1) / ty;
  gy = gy < 65535 ? gy : 65535;
  return {dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)),
          dim3(static_cast<unsigned>(tx), static_cast<unsigned>(ty))};
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
  const Launch l = kind == ACT_SILU_AND_MUL ? launch_for<kGatedUnroll>(s.rows, s.d / VEC)
                                            : launch_for<kUnaryUnroll>(s.rows, s.d / VEC);
  switch (kind) {
    case ACT_GELU_FAST:
      unary_kernel<T, GeluFast<kFast>, VEC><<<l.grid, l.block, 0, stream>>>(
          out, in, s.rows, s.d, s.out_stride, s.in_stride);
      break;
    case ACT_GELU_TANH:
      unary_kernel<T, GeluTanh<kFast>, VEC><<<l.grid, l.block, 0, stream>>>(
          out, in, s.rows, s.d, s.out_stride, s.in_stride);
      break;
    case ACT_GELU:
      unary_kernel<T, Gelu<kFast>, VEC><<<l.grid, l.block, 0, stream>>>(
          out, in, s.rows, s.d, s.out_stride, s.in_stride);
      break;
    case ACT_SILU_AND_MUL:
      silu_and_mul_kernel<T, VEC><<<l.grid, l.block, 0, stream>>>(out, in, s.rows, s.d,
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
