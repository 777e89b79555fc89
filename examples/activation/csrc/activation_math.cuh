// The activations' float32 math (also used by gpu/tune's design sweep).
#pragma once
#include <cuda_runtime.h>

namespace activation_math {

// All math in float32, rounded once to the storage type (as PyTorch does). For half and
// bfloat16 outputs the transcendental parts use the hardware's approximate 2^x and 1/x
// (about 2 ulp of float32) and A&S 7.1.26 for erf (1.5e-7 absolute), far below the output's
// rounding; float32 outputs keep the libm functions.
__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float rcp_approx(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// 0.5 x (1 + tanh(u)) = x sigmoid(2u), with u = sqrt(2/pi) (x + 0.044715 x^3).
template <bool kFast>
__device__ __forceinline__ float gelu_tanh(float x) {
  if constexpr (kFast) {
    const float k = x * (-2.302208198f - 0.1029432371f * x * x);  // -2 u log2(e)
    return x * rcp_approx(1.0f + ex2_approx(k));
  } else {
    const float inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(inner));
  }
}
template <bool kFast>
struct GeluFast {  // the same function, written as 0.79788 x (1 + 0.044715 x^2)
  __device__ __forceinline__ float operator()(float x) const {
    if constexpr (kFast) {
      return gelu_tanh<true>(x);
    } else {
      return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * x * (1.0f + 0.044715f * x * x)));
    }
  }
};
template <bool kFast>
struct GeluTanh {
  __device__ __forceinline__ float operator()(float x) const { return gelu_tanh<kFast>(x); }
};
template <bool kFast>
struct Gelu {
  __device__ __forceinline__ float operator()(float x) const {
    if constexpr (kFast) {
      // x Phi(x); h = 0.5 erfc(|x| / sqrt 2) by A&S 7.1.26 (constants folded), Phi = 1 - h or h.
      const float t = rcp_approx(1.0f + 0.2316419f * fabsf(x));
      const float e = ex2_approx(x * x * -0.7213475204444817f);  // exp(-x^2 / 2)
      const float p = t * (0.127414796f + t * (-0.142248368f + t * (0.7107068705f +
                      t * (-0.7265760135f + t * 0.5307027145f))));
      const float h = p * e;
      return x * (x >= 0.0f ? 1.0f - h : h);
    } else {
      return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
    }
  }
};
template <bool kFast>
__device__ __forceinline__ float silu(float x) {
  if constexpr (kFast) {
    return x * rcp_approx(1.0f + ex2_approx(x * -1.4426950408889634f));
  } else {
    return x / (1.0f + expf(-x));
  }
}

}  // namespace activation_math
