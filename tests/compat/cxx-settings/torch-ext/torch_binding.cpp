#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>

#include "registration.h"

    #include "total.h"  // found through csrc/, as with kernel-builder

    using torch::stable::Tensor;

    namespace {

    double total_of(Tensor x) { return total(static_cast<const float*>(x.data_ptr()), x.numel()); }

    }  // namespace

    STABLE_TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
      ops.def("total(Tensor x) -> float");
    }

    STABLE_TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CPU, ops) {
      ops.impl("total", TORCH_BOX(&total_of));
    }

    REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
