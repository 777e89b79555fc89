#include <cmath>
#include <cstring>

#include "rms_norm.h"

namespace {

inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// IEEE binary16 <-> float, round to nearest even.
inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return bits_to_float(sign | 0x7f800000u | (mant << 13));
  return bits_to_float(sign | ((exp + 112) << 23) | (mant << 13));
}

inline uint16_t float_to_half(float f) {
  const uint32_t x = float_to_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return sign | 0x7e00u;  // NaN
  if (ax >= 0x477ff000u) return sign | 0x7c00u;  // rounds to infinity
  if (ax < 0x38800000u) {  // below 2^-14: subnormal, in units of 2^-24
    return sign | static_cast<uint16_t>(std::nearbyint(bits_to_float(ax) * 16777216.0f));
  }
  const uint32_t r = ax + 0xfffu + ((ax >> 13) & 1u);
  return sign | static_cast<uint16_t>((r >> 13) - (112u << 10));
}

inline float bf16_to_float(uint16_t b) { return bits_to_float(static_cast<uint32_t>(b) << 16); }

inline uint16_t float_to_bf16(float f) {
  const uint32_t u = float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

struct F32 {
  using T = float;
  static float load(float v) { return v; }
  static float round(float v) { return v; }
  static float store(float v) { return v; }
};
struct F16 {
  using T = uint16_t;
  static float load(uint16_t v) { return half_to_float(v); }
  static float round(float v) { return half_to_float(float_to_half(v)); }
  static uint16_t store(float v) { return float_to_half(v); }
};
struct BF16 {
  using T = uint16_t;
  static float load(uint16_t v) { return bf16_to_float(v); }
  static float round(float v) { return bf16_to_float(float_to_bf16(v)); }
  static uint16_t store(float v) { return float_to_bf16(v); }
};

template <typename X, typename W>
void rows(void* out_, const void* x_, const void* w_, const RmsShape& s, float inv_n, float eps,
          int64_t begin, int64_t end) {
  using T = typename X::T;
  T* out = static_cast<T*>(out_);
  const T* x = static_cast<const T*>(x_);
  const typename W::T* w = static_cast<const typename W::T*>(w_);
  for (int64_t r = begin; r < end; ++r) {
    const T* xr = x + r * s.x_stride;
    T* yr = out + r * s.n;
    float sum = 0.f;
    for (int64_t i = 0; i < s.n; ++i) {
      const float f = X::load(xr[i]);
      sum += f * f;
    }
    const float rstd = 1.0f / std::sqrt(sum * inv_n + eps);
    for (int64_t i = 0; i < s.n; ++i) {
      const float normed = X::round(X::load(xr[i]) * rstd);
      yr[i] = X::store(W::load(w[i]) * normed);
    }
  }
}

}  // namespace

void rms_norm_cpu(int dtype, int weight_dtype, void* out, const void* x, const void* weight,
                  RmsShape shape, float inv_n, float eps, int64_t begin, int64_t end) {
  const bool wf = weight_dtype == RMS_FLOAT32;
  switch (dtype) {
    case RMS_FLOAT32: rows<F32, F32>(out, x, weight, shape, inv_n, eps, begin, end); break;
    case RMS_FLOAT16:
      if (wf) rows<F16, F32>(out, x, weight, shape, inv_n, eps, begin, end);
      else rows<F16, F16>(out, x, weight, shape, inv_n, eps, begin, end);
      break;
    case RMS_BFLOAT16:
      if (wf) rows<BF16, F32>(out, x, weight, shape, inv_n, eps, begin, end);
      else rows<BF16, BF16>(out, x, weight, shape, inv_n, eps, begin, end);
      break;
    default: break;
  }
}
