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

// All math in float32, rounded once to the storage type (as PyTorch does).
struct GeluFast {
  float operator()(float x) const {
    return 0.5f * x * (1.0f + std::tanh(0.7978845608028654f * x * (1.0f + 0.044715f * x * x)));
  }
};
struct GeluTanh {
  float operator()(float x) const {
    const float inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + std::tanh(inner));
  }
};
struct Gelu {
  float operator()(float x) const { return 0.5f * x * (1.0f + std::erf(x * 0.7071067811865476f)); }
};
inline float silu(float x) { return x / (1.0f + std::exp(-x)); }

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

template <typename D, typename Op>
void unary(void* out, const void* in, const ActShape& s, int64_t begin, int64_t end) {
  auto* o = static_cast<typename D::T*>(out);
  const auto* x = static_cast<const typename D::T*>(in);
  const Op op;
  for_segments(s, begin, end, [&](int64_t r, int64_t c, int64_t stop) {
    typename D::T* orow = o + r * s.out_stride;
    const typename D::T* xrow = x + r * s.in_stride;
    for (int64_t k = c; k < stop; ++k) orow[k] = D::store(op(D::load(xrow[k])));
  });
}

// silu(gate) is rounded to the storage type before the product, like F.silu(gate) * up.
template <typename D>
void silu_and_mul(void* out, const void* in, const ActShape& s, int64_t begin, int64_t end) {
  auto* o = static_cast<typename D::T*>(out);
  const auto* x = static_cast<const typename D::T*>(in);
  for_segments(s, begin, end, [&](int64_t r, int64_t c, int64_t stop) {
    typename D::T* orow = o + r * s.out_stride;
    const typename D::T* gate = x + r * s.in_stride;
    const typename D::T* up = gate + s.d;
    for (int64_t k = c; k < stop; ++k) {
      const float g = D::load(D::store(silu(D::load(gate[k]))));
      orow[k] = D::store(g * D::load(up[k]));
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
