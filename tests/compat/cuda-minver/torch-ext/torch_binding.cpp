#include <cuda.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>

#include "registration.h"
#include "scale.h"

using torch::stable::Tensor;

// kernel.scale_new (cuda-minver 13.2) is only part of builds with CUDA >= 13.2.
#define HAS_NEW_KERNEL (CUDA_VERSION >= 13020)

namespace {

void scale_out(Tensor x, double s, Tensor out) {
  STD_TORCH_CHECK(x.numel() == out.numel(), "x and out differ in size");
  const auto* in = static_cast<const float*>(x.data_ptr());
  auto* result = static_cast<float*>(out.data_ptr());
#if HAS_NEW_KERNEL
  scale_new(in, result, x.numel(), static_cast<float>(s));
#else
  scale_cuda(in, result, x.numel(), static_cast<float>(s));
#endif
}

bool has_new_kernel() { return HAS_NEW_KERNEL; }

}  // namespace

STABLE_TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
  ops.def("scale_out(Tensor x, float s, Tensor! out) -> ()");
  ops.def("has_new_kernel() -> bool");
}

STABLE_TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, ops) {
  ops.impl("scale_out", TORCH_BOX(&scale_out));
}

STABLE_TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CompositeExplicitAutograd, ops) {
  ops.impl("has_new_kernel", TORCH_BOX(&has_new_kernel));
}

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
