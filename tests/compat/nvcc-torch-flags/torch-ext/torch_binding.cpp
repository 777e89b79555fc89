#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>

#include "registration.h"

    #include "clamp_scale.h"

    using torch::stable::Tensor;

    namespace {

    void clamp_scale_out(Tensor x, double s, double hi, Tensor out) {
      STD_TORCH_CHECK(x.numel() == out.numel(), "x and out differ in size");
      clamp_scale(static_cast<const float*>(x.data_ptr()), static_cast<float*>(out.data_ptr()),
                  x.numel(), static_cast<float>(s), static_cast<float>(hi));
    }

    }  // namespace

    STABLE_TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
      ops.def("clamp_scale_out(Tensor x, float s, float hi, Tensor! out) -> ()");
    }

    STABLE_TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, ops) {
      ops.impl("clamp_scale_out", TORCH_BOX(&clamp_scale_out));
    }

    REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
