#include <torch/library.h>

#include "registration.h"
#include "api.h"

namespace {

void check(const at::Tensor& x, const at::Tensor& out) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kFloat && x.is_contiguous(),
              "x must be a contiguous float CUDA tensor");
  TORCH_CHECK(x.sizes() == out.sizes() && out.scalar_type() == at::kFloat, "x and out differ");
}

void scale_out(const at::Tensor& x, double s, at::Tensor& out) {
  check(x, out);
  scale_api(x.data_ptr<float>(), out.data_ptr<float>(), x.numel(), static_cast<float>(s));
}

// Calls the Blackwell kernel directly: the binding links against every kernel.
void scale_blackwell_out(const at::Tensor& x, double s, at::Tensor& out) {
  check(x, out);
  scale_sm100(x.data_ptr<float>(), out.data_ptr<float>(), x.numel(), static_cast<float>(s));
}

}  // namespace

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
  ops.def("scale_out(Tensor x, float s, Tensor! out) -> ()");
  ops.impl("scale_out", c10::kCUDA, &scale_out);
  ops.def("scale_blackwell_out(Tensor x, float s, Tensor! out) -> ()");
  ops.impl("scale_blackwell_out", c10::kCUDA, &scale_blackwell_out);
}

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
