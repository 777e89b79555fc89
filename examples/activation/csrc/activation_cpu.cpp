#include <algorithm>
#include <cmath>
#include <cstring>

#include "activation.h"

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
  static float store(float v) { return v; }
};
struct F16 {
  using T = uint16_t;
  static float load(uint16_t v) { return half_to_float(v); }
  static uint16_t store(float v) { return float_to_half(v); }
};
struct BF16 {
  using T = uint16_t;
  static float load(uint16_t v) { return bf16_to_float(v); }
  static uint16_t store(float v) { return float_to_bf16(v); }
};

// Branch-free float math, so that GCC vectorises the loops below.

// exp(x), Cephes' polynomial after reduction by ln 2 (about 2 ulp); the
// argument is clamped to [-87, 88], which keeps 2^n a normal float.
inline float exp_approx(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);
  const float t = x * 1.44269504088896341f;
  const int n = static_cast<int>(t + std::copysign(0.5f, t));
  const float fn = static_cast<float>(n);
  const float r = (x - fn * 0.693359375f) + fn * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * bits_to_float(static_cast<uint32_t>(n + 127) << 23);
}

// erfc(z) for z >= 0 (Numerical Recipes' Chebyshev fit, relative error < 1.2e-7).
inline float erfc_nonneg(float z) {
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  return t * exp_approx(p - z * z);
}

// 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)): no cancellation for negative x.
struct GeluFast {
  float operator()(float x) const {
    const float u = 0.7978845608028654f * x * (1.0f + 0.044715f * x * x);
    return x / (1.0f + exp_approx(-2.0f * u));
  }
};
struct GeluTanh {
  float operator()(float x) const {
    const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return x / (1.0f + exp_approx(-2.0f * u));
  }
};
// 0.5 x (1 + erf(x / sqrt 2)) = 0.5 x erfc(-x / sqrt 2).
struct Gelu {
  float operator()(float x) const {
    const float c = erfc_nonneg(std::fabs(x) * 0.7071067811865476f);
    const float pos = 2.0f - c;
    return 0.5f * x * (x >= 0.0f ? pos : c);
  }
};
struct Silu {
  float operator()(float x) const { return x / (1.0f + exp_approx(-x)); }
};

// Visits the flat output range [begin, end) one row segment at a time.
template <typename F>
void for_segments(const ActShape& s, int64_t begin, int64_t end, F&& f) {
  int64_t i = begin;
  while (i < end) {
    const int64_t r = i / s.d;
    const int64_t c = i - r * s.d;
    const int64_t stop = std::min(s.d, c + (end - i));
    f(r, c, stop);
    i += stop - c;
  }
}

constexpr int64_t kChunk = 256;  // floats per staging buffer

// Each segment goes through float buffers: convert in, math (vectorised), convert out.
template <typename D, typename Op>
void unary(void* out, const void* in, const ActShape& s, int64_t begin, int64_t end) {
  auto* o = static_cast<typename D::T*>(out);
  const auto* x = static_cast<const typename D::T*>(in);
  const Op op;
  float buf[kChunk];
  for_segments(s, begin, end, [&](int64_t r, int64_t c, int64_t stop) {
    typename D::T* orow = o + r * s.out_stride;
    const typename D::T* xrow = x + r * s.in_stride;
    for (int64_t k0 = c; k0 < stop; k0 += kChunk) {
      const int64_t m = std::min(kChunk, stop - k0);
      for (int64_t k = 0; k < m; ++k) buf[k] = D::load(xrow[k0 + k]);
      for (int64_t k = 0; k < m; ++k) buf[k] = op(buf[k]);
      for (int64_t k = 0; k < m; ++k) orow[k0 + k] = D::store(buf[k]);
    }
  });
}

// silu(gate) is rounded to the storage type before the product, like F.silu(gate) * up.
template <typename D>
void silu_and_mul(void* out, const void* in, const ActShape& s, int64_t begin, int64_t end) {
  auto* o = static_cast<typename D::T*>(out);
  const auto* x = static_cast<const typename D::T*>(in);
  const Silu silu;
  float g[kChunk], u[kChunk];
  for_segments(s, begin, end, [&](int64_t r, int64_t c, int64_t stop) {
    typename D::T* orow = o + r * s.out_stride;
    const typename D::T* gate = x + r * s.in_stride;
    const typename D::T* up = gate + s.d;
    for (int64_t k0 = c; k0 < stop; k0 += kChunk) {
      const int64_t m = std::min(kChunk, stop - k0);
      for (int64_t k = 0; k < m; ++k) g[k] = D::load(gate[k0 + k]);
      for (int64_t k = 0; k < m; ++k) u[k] = D::load(up[k0 + k]);
      for (int64_t k = 0; k < m; ++k) g[k] = silu(g[k]);
      for (int64_t k = 0; k < m; ++k) g[k] = D::load(D::store(g[k])) * u[k];
      for (int64_t k = 0; k < m; ++k) orow[k0 + k] = D::store(g[k]);
    }
  });
}

template <typename D>
void run(int kind, void* out, const void* in, const ActShape& s, int64_t begin, int64_t end) {
  switch (kind) {
    case ACT_GELU_FAST: unary<D, GeluFast>(out, in, s, begin, end); break;
    case ACT_GELU_TANH: unary<D, GeluTanh>(out, in, s, begin, end); break;
    case ACT_GELU: unary<D, Gelu>(out, in, s, begin, end); break;
    case ACT_SILU_AND_MUL: silu_and_mul<D>(out, in, s, begin, end); break;
  }
}

}  // namespace

void activation_cpu(int kind, int dtype, void* out, const void* in, ActShape shape,
                    int64_t begin, int64_t end) {
  if (begin >= end || shape.d <= 0) return;
  switch (dtype) {
    case ACT_FLOAT32: run<F32>(kind, out, in, shape, begin, end); break;
    case ACT_FLOAT16: run<F16>(kind, out, in, shape, begin, end); break;
    case ACT_BFLOAT16: run<BF16>(kind, out, in, shape, begin, end); break;
  }
}
