#include "registration.h"

#ifndef OWN_REGISTRATION_H
#error "the builder's registration.h was used instead of the project's"
#endif
#include <ATen/core/Tensor.h>

#include "scale.h"

namespace {

void scale_out(const at::Tensor& x, double s, at::Tensor& out) {
  TORCH_CHECK(x.scalar_type() == at::kFloat && out.scalar_type() == at::kFloat, "float32 only");
  TORCH_CHECK(x.is_contiguous() && out.is_contiguous() && x.numel() == out.numel(), "bad shapes");
  scale_cpu(x.const_data_ptr<float>(), out.mutable_data_ptr<float>(), x.numel(), static_cast<float>(s));
}

}  // namespace

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
  ops.def("scale_out(Tensor x, float s, Tensor! out) -> ()");
  ops.def("namespace_name() -> str");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CPU, ops) {
  ops.impl("scale_out", &scale_out);
}

// The namespace as the compiler saw it.
TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CompositeExplicitAutograd, ops) {
  ops.impl("namespace_name", []() -> std::string { return STRINGIFY(TORCH_EXTENSION_NAME); });
}

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
