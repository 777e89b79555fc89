// Design-space sweep of the element-wise GELU kernels (gpu/tune/tune.py times every variant).
// Knobs: math form (0: the earlier one, with __expf / __fdividef; 1: the shipped one from
// activation_math.cuh: sigmoid form of tanh-GELU, erf-GELU from A&S 7.1.26 with 0.5 folded
// in, approximate ex2/rcp without denormal fix-ups), packs of
// 16 bytes per thread and step (U), block size, cache hints (0: plain loads and stores,
// 1: evict-first loads, 2: evict-first loads and stores) and grid policy (0: persistent,
// 2048 threads per SM; 1: one pass over the data).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "../../examples/activation/csrc/activation_math.cuh"

namespace {

template <int MATH>
struct GeluErf {
  __device__ __forceinline__ float operator()(float x) const {
    if constexpr (MATH == 0) {
      const float z = x * 0.7071067811865476f;
      const float ax = fabsf(z);
      const float t = __fdividef(1.0f, 1.0f + 0.3275911f * ax);
      const float poly = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f +
                         t * (-1.453152027f + t * 1.061405429f))));
      const float y = 1.0f - poly * __expf(-ax * ax);
      return 0.5f * x * (1.0f + copysignf(y, z));
    } else {
      return activation_math::Gelu<true>()(x);  // the shipped form
    }
  }
};

template <int MATH>
struct GeluTanh {
  __device__ __forceinline__ float operator()(float x) const {
    if constexpr (MATH == 0) {
      const float inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);
      return 0.5f * x * (1.0f + (1.0f - __fdividef(2.0f, __expf(2.0f * inner) + 1.0f)));
    } else {
      return activation_math::GeluTanh<true>()(x);  // the shipped form
    }
  }
};

template <int CACHE>
__device__ __forceinline__ uint4 load(const uint4* p) {
  if constexpr (CACHE == 0) return *p;
  else return __ldcs(p);
}
template <int CACHE>
__device__ __forceinline__ void store(uint4* p, uint4 v) {
  if constexpr (CACHE == 2) __stcs(p, v);
  else *p = v;
}

template <class Op>
__device__ __forceinline__ uint4 apply(uint4 v) {
  const Op op;
  __half2* h = reinterpret_cast<__half2*>(&v);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 f = __half22float2(h[k]);
    h[k] = __floats2half2_rn(op(f.x), op(f.y));
  }
  return v;
}

// Chunks of BLOCK * U packs; chunk c, step u: pack c * BLOCK * U + u * BLOCK + threadIdx.x.
template <class Op, int U, int BLOCK, int CACHE>
__global__ void __launch_bounds__(BLOCK)
kernel(uint4* __restrict__ out, const uint4* __restrict__ in, int64_t packs) {
  for (int64_t c = blockIdx.x; c * BLOCK * U < packs; c += gridDim.x) {
    const int64_t base = c * BLOCK * U + threadIdx.x;
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (base + u * BLOCK < packs) v[u] = load<CACHE>(in + base + u * BLOCK);
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (base + u * BLOCK < packs) store<CACHE>(out + base + u * BLOCK, apply<Op>(v[u]));
  }
}

struct Variant {
  std::string name;
  const void* fn;
  int u, block, grid;
};

template <template <int> class Op, int MATH, int U, int BLOCK, int CACHE>
void add(std::vector<Variant>& v, const char* op) {
  for (int grid = 0; grid < 2; ++grid) {
    std::string n = std::string(op) + "/m" + std::to_string(MATH) + "/u" + std::to_string(U) +
                    "/b" + std::to_string(BLOCK) + "/c" + std::to_string(CACHE) +
                    (grid ? "/onepass" : "/persistent");
    v.push_back({n, reinterpret_cast<const void*>(&kernel<Op<MATH>, U, BLOCK, CACHE>), U, BLOCK,
                 grid});
  }
}

template <template <int> class Op, int MATH, int U, int BLOCK>
void add_c(std::vector<Variant>& v, const char* op) {
  add<Op, MATH, U, BLOCK, 0>(v, op);
  add<Op, MATH, U, BLOCK, 1>(v, op);
  add<Op, MATH, U, BLOCK, 2>(v, op);
}
template <template <int> class Op, int MATH, int U>
void add_b(std::vector<Variant>& v, const char* op) {
  add_c<Op, MATH, U, 128>(v, op);
  add_c<Op, MATH, U, 256>(v, op);
  add_c<Op, MATH, U, 512>(v, op);
}
template <template <int> class Op, int MATH>
void add_u(std::vector<Variant>& v, const char* op) {
  add_b<Op, MATH, 1>(v, op);
  add_b<Op, MATH, 2>(v, op);
  add_b<Op, MATH, 4>(v, op);
}

const std::vector<Variant>& variants() {
  static std::vector<Variant> v = [] {
    std::vector<Variant> r;
    add_u<GeluErf, 0>(r, "gelu");
    add_u<GeluErf, 1>(r, "gelu");
    add_u<GeluTanh, 0>(r, "gelu_tanh");
    add_u<GeluTanh, 1>(r, "gelu_tanh");
    return r;
  }();
  return v;
}

}  // namespace

extern "C" int variant_count() { return static_cast<int>(variants().size()); }
extern "C" const char* variant_name(int i) { return variants()[i].name.c_str(); }

// fp16, numel a multiple of 8, 16-byte aligned.
extern "C" int variant_launch(int i, void* out, const void* in, int64_t numel, void* stream) {
  const Variant& v = variants()[i];
  int64_t packs = numel / 8;
  const int64_t chunk = static_cast<int64_t>(v.block) * v.u;
  int64_t blocks = (packs + chunk - 1) / chunk;
  if (v.grid == 0) {
    int dev = 0, sms = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    const int64_t resident = static_cast<int64_t>(sms) * (2048 / v.block);
    if (blocks > resident) blocks = resident;
  }
  if (blocks < 1) blocks = 1;
  void* args[] = {&out, &in, &packs};
  return static_cast<int>(cudaLaunchKernel(v.fn, dim3(static_cast<unsigned>(blocks)),
                                           dim3(v.block), args, 0,
                                           static_cast<cudaStream_t>(stream)));
}
