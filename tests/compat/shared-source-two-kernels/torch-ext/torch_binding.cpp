#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>

#include "registration.h"

    #include "api.h"

    using torch::stable::Tensor;

    namespace {

    void scale_out(Tensor x, double s, Tensor out) {
      STD_TORCH_CHECK(x.numel() == out.numel(), "x and out differ in size");
      scale_api(static_cast<const float*>(x.data_ptr()), static_cast<float*>(out.data_ptr()),
                x.numel(), static_cast<float>(s));
    }

    }  // namespace

    STABLE_TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
      ops.def("scale_out(Tensor x, float s, Tensor! out) -> ()");
    }

    STABLE_TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, ops) {
      ops.impl("scale_out", TORCH_BOX(&scale_out));
    }

    REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
