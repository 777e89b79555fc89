#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>

#include "registration.h"
#include "round_half.h"

using torch::stable::Tensor;

namespace {

int64_t round_half_out(Tensor x, Tensor out) {
  STD_TORCH_CHECK(x.numel() == out.numel(), "x and out differ in size");
  return round_half(static_cast<const float*>(x.data_ptr()), static_cast<float*>(out.data_ptr()),
                    x.numel());
}

}  // namespace

STABLE_TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
  ops.def("round_half_out(Tensor x, Tensor! out) -> int");
}

STABLE_TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, ops) {
  ops.impl("round_half_out", TORCH_BOX(&round_half_out));
}

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
