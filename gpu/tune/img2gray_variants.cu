// Design-space sweep of the img2gray CUDA kernel (gpu/tune/tune.py times every variant).
// Knobs: load cache hint, store cache hint, groups per warp and step, how a warp gets its
// 16 pixels per lane (through shared memory, or three direct 16-byte loads of its own 48
// bytes), and grid policy (one step per warp, or a persistent grid of resident blocks).
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "../../csrc/img2gray_convert.cuh"

namespace {

using img2gray_detail::convert16;
using img2gray_detail::luma;

template <int LD>
__device__ __forceinline__ uint4 load(const uint4* p) {
  if constexpr (LD == 0) return *p;
  else if constexpr (LD == 1) return __ldcs(p);
  else return __ldg(p);
}
template <int ST>
__device__ __forceinline__ void store(uint4* p, uint4 v) {
  if constexpr (ST == 0) *p = v;
  else __stcs(p, v);
}

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kGroup = 512;

template <int LD, int ST, int U, bool DIRECT>
__global__ void __launch_bounds__(kThreads)
kernel(const uint8_t* __restrict__ rgb, uint8_t* __restrict__ gray, int64_t pixels) {
  __shared__ uint4 tile[DIRECT ? 1 : kWarps][96];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int64_t groups = pixels / kGroup;
  const uint4* in = reinterpret_cast<const uint4*>(rgb);
  uint4* out = reinterpret_cast<uint4*>(gray);
  for (int64_t g0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * U; g0 < groups;
       g0 += static_cast<int64_t>(gridDim.x) * kWarps * U) {
    uint4 v[U][3];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (g0 + u < groups) {
        const uint4* src = in + (g0 + u) * 96;
        if constexpr (DIRECT) {
          v[u][0] = load<LD>(src + 3 * lane);
          v[u][1] = load<LD>(src + 3 * lane + 1);
          v[u][2] = load<LD>(src + 3 * lane + 2);
        } else {
          v[u][0] = load<LD>(src + lane);
          v[u][1] = load<LD>(src + 32 + lane);
          v[u][2] = load<LD>(src + 64 + lane);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (g0 + u < groups) {
        if constexpr (DIRECT) {
          store<ST>(out + (g0 + u) * 32 + lane, convert16(v[u][0], v[u][1], v[u][2]));
        } else {
          uint4* t = tile[warp];
          t[lane] = v[u][0];
          t[32 + lane] = v[u][1];
          t[64 + lane] = v[u][2];
          __syncwarp();
          const uint4 p0 = t[3 * lane], p1 = t[3 * lane + 1], p2 = t[3 * lane + 2];
          __syncwarp();
          store<ST>(out + (g0 + u) * 32 + lane, convert16(p0, p1, p2));
        }
      }
    }
  }
  const int64_t i = groups * kGroup + static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i < pixels) gray[i] = static_cast<uint8_t>(luma(rgb[3 * i], rgb[3 * i + 1], rgb[3 * i + 2]));
}

using Fn = void (*)(const uint8_t*, uint8_t*, int64_t);
struct Variant {
  std::string name;
  const void* fn;
  int u;
  int grid;  // 0: one step per warp, 1: persistent (resident blocks only)
};

template <int LD, int ST, int U, bool DIRECT>
void add(std::vector<Variant>& v) {
  static const char* ld[] = {"ld", "ldcs", "ldg"};
  static const char* st[] = {"st", "stcs"};
  for (int grid = 0; grid < 2; ++grid) {
    std::string n = std::string(ld[LD]) + "/" + st[ST] + "/u" + std::to_string(U) + "/" +
                    (DIRECT ? "direct" : "smem") + "/" + (grid ? "persistent" : "onestep");
    v.push_back({n, reinterpret_cast<const void*>(&kernel<LD, ST, U, DIRECT>), U, grid});
  }
}

template <int LD, int ST, bool DIRECT>
void add_u(std::vector<Variant>& v) {
  add<LD, ST, 1, DIRECT>(v);
  add<LD, ST, 2, DIRECT>(v);
  add<LD, ST, 4, DIRECT>(v);
}

const std::vector<Variant>& variants() {
  static std::vector<Variant> v = [] {
    std::vector<Variant> r;
    add_u<0, 0, false>(r); add_u<0, 1, false>(r); add_u<1, 0, false>(r); add_u<1, 1, false>(r);
    add_u<2, 0, false>(r); add_u<2, 1, false>(r);
    add_u<0, 0, true>(r); add_u<0, 1, true>(r); add_u<1, 0, true>(r); add_u<1, 1, true>(r);
    add_u<2, 0, true>(r); add_u<2, 1, true>(r);
    return r;
  }();
  return v;
}

}  // namespace

extern "C" int variant_count() { return static_cast<int>(variants().size()); }
extern "C" const char* variant_name(int i) { return variants()[i].name.c_str(); }

extern "C" int variant_launch(int i, const uint8_t* rgb, uint8_t* gray, int64_t pixels,
                              void* stream) {
  const Variant& v = variants()[i];
  const int64_t groups = pixels / kGroup;
  const int64_t tail_blocks = (pixels - groups * kGroup + kThreads - 1) / kThreads;
  int64_t blocks = (groups + kWarps * v.u - 1) / (kWarps * v.u);
  if (v.grid == 1) {
    int dev = 0, sms = 0, per_sm = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, v.fn, kThreads, 0);
    const int64_t resident = static_cast<int64_t>(sms) * per_sm;
    if (blocks > resident) blocks = resident;
  }
  blocks = blocks > tail_blocks ? blocks : tail_blocks;
  if (blocks < 1) blocks = 1;
  void* args[] = {&rgb, &gray, &pixels};
  return static_cast<int>(cudaLaunchKernel(v.fn, dim3(static_cast<unsigned>(blocks)),
                                           dim3(kThreads), args, 0,
                                           static_cast<cudaStream_t>(stream)));
}

namespace {
__global__ void empty_kernel() {}
}  // namespace

// The harness floor: a kernel that does nothing.
extern "C" int empty_launch(void* stream) {
  empty_kernel<<<1, 32, 0, static_cast<cudaStream_t>(stream)>>>();
  return static_cast<int>(cudaGetLastError());
}
