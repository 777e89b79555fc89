#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <string>

#if defined(CUDA_KERNEL)
#include <ATen/cuda/EmptyTensor.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "registration.h"
#include "rms_norm.h"
#include "torch_binding.h"

namespace {

// A new contiguous tensor straight from the device's allocator: at::empty would go through the
// dispatcher once more, a few microseconds of host time per call.
at::Tensor new_empty(at::IntArrayRef sizes, const at::Tensor& like) {
#if defined(CUDA_KERNEL)
  if (like.is_cuda()) return at::detail::empty_cuda(sizes, like.scalar_type(), like.device(), std::nullopt);
#endif
  if (like.is_cpu()) return at::detail::empty_cpu(sizes, like.scalar_type());
  return at::empty(sizes, like.options());
}

int dtype_code(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return RMS_FLOAT32;
    case at::kHalf: return RMS_FLOAT16;
    case at::kBFloat16: return RMS_BFLOAT16;
    default: return -1;
  }
}

// Views `t` as rows of its last dimension: true when that dimension is contiguous and the
// leading ones collapse into a single row stride.
bool row_view(const at::Tensor& t, int64_t& rows, int64_t& stride) {
  const int64_t n = t.dim();
  rows = 1;
  stride = t.size(-1);
  if (t.size(-1) > 1 && t.stride(-1) != 1) return false;
  int64_t expect = -1;
  for (int64_t k = n - 2; k >= 0; --k) {
    const int64_t size = t.size(k);
    rows *= size;
    if (size == 1) continue;
    if (expect < 0) {
      stride = t.stride(k);
      expect = stride * size;
    } else if (t.stride(k) != expect) {
      return false;
    } else {
      expect *= size;
    }
  }
  return true;
}

// PyTorch ops with the same rounding steps, for dtypes the kernels do not take (float64).
at::Tensor rms_norm_composite(const at::Tensor& input, const at::Tensor& weight, double eps) {
  const auto dtype = input.scalar_type();
  const auto x = input.to(at::promote_types(dtype, at::kFloat));
  const auto normed = (x * at::rsqrt(x.pow(2).mean(-1, true) + eps)).to(dtype);
  return (weight * normed).to(dtype).contiguous();
}

// The op itself, below autograd (the CPU and CUDA kernel).
at::Tensor rms_norm_kernel(const at::Tensor& input, const at::Tensor& weight, double eps) {
  TORCH_CHECK_TYPE(input.is_floating_point(),
                   "rms_norm: hidden_states must be floating point, got ", input.scalar_type());
  const int64_t n = input.dim() > 0 ? input.size(-1) : -1;
  TORCH_CHECK_VALUE(n >= 0 && weight.dim() == 1 && weight.size(0) == n,
                    "rms_norm: weight must have shape (", n,
                    ",) to match the last dimension of hidden_states ", input.sizes(), ", got ",
                    weight.sizes());
  TORCH_CHECK_VALUE(weight.device() == input.device(), "rms_norm: hidden_states is on ",
                    input.device(), " but weight is on ", weight.device());
  const int dtype = dtype_code(input.scalar_type());
  int wdtype = dtype_code(weight.scalar_type());
  if (dtype < 0 || wdtype < 0) return rms_norm_composite(input, weight, eps);

  at::Tensor out = new_empty(input.sizes(), input);
  if (out.numel() == 0) return out;
  at::Tensor x = input;
  RmsShape s{};
  if (!row_view(x, s.rows, s.x_stride)) {
    x = input.contiguous();
    row_view(x, s.rows, s.x_stride);
  }
  s.n = n;
  // A weight of another type than the input is read as float32 (exact for these types).
  at::Tensor w = weight;
  if (wdtype != dtype && wdtype != RMS_FLOAT32) {
    w = weight.to(at::kFloat);
    wdtype = RMS_FLOAT32;
  }
  w = w.contiguous();
  const float inv_n = 1.0f / static_cast<float>(n);
  const float feps = static_cast<float>(eps);
  void* o = out.data_ptr();
  const void* xp = x.const_data_ptr();
  const void* wp = w.const_data_ptr();
  if (out.is_cpu()) {
    const int64_t grain = std::max<int64_t>(1, (1 << 14) / n);
    at::parallel_for(0, s.rows, grain, [&](int64_t begin, int64_t end) {
      rms_norm_cpu(dtype, wdtype, o, xp, wp, s, inv_n, feps, begin, end);
    });
  } else {
#if defined(CUDA_KERNEL)
    const c10::cuda::CUDAGuard guard(out.device());
    const int err = rms_norm_cuda_launch(dtype, wdtype, o, xp, wp, s, inv_n, feps,
                                         c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == 0, "rms_norm: CUDA kernel launch failed with error ", err);
#else
    TORCH_CHECK(false, "rms_norm: this build has no kernel for device ", out.device());
#endif
  }
  return out;
}

const c10::TypedOperatorHandle<at::Tensor(const at::Tensor&, const at::Tensor&, double)>&
rms_norm_handle() {
  static const auto handle =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow(STRINGIFY(TORCH_EXTENSION_NAME) "::rms_norm", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, double)>();
  return handle;
}

at::Tensor rms_norm_below_autograd(const at::Tensor& input, const at::Tensor& weight,
                                   double eps) {
  const at::AutoDispatchBelowADInplaceOrView guard;
  return rms_norm_handle().call(input, weight, eps);
}

// Backward in float32 (float64 for float64 inputs), ignoring the forward's intermediate
// rounding.
struct RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input,
                            const at::Tensor& weight, double eps) {
    ctx->save_for_backward({input, weight});
    ctx->saved_data["eps"] = eps;
    return rms_norm_below_autograd(input, weight, eps);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& weight = saved[1];
    const double eps = ctx->saved_data["eps"].toDouble();
    const auto compute = at::promote_types(x.scalar_type(), at::kFloat);
    const auto xf = x.to(compute);
    const auto rstd = at::rsqrt(xf.pow(2).mean(-1, true) + eps);
    const auto x_hat = xf * rstd;
    const auto g = grads[0].to(compute);
    const auto gw = g * weight.to(compute);
    const auto dx = rstd * (gw - x_hat * (gw * x_hat).mean(-1, true));
    const auto dw = (g * x_hat).reshape({-1, x.size(-1)}).sum(0);
    return {dx.to(x.scalar_type()), dw.to(weight.scalar_type()), at::Tensor()};
  }
};

// Without grad (inference), straight to the kernel: no autograd node is made.
at::Tensor rms_norm_autograd(const at::Tensor& input, const at::Tensor& weight, double eps) {
  if (!at::GradMode::is_enabled() || !(input.requires_grad() || weight.requires_grad())) {
    return rms_norm_below_autograd(input, weight, eps);
  }
  return RmsNormFunction::apply(input, weight, eps);
}

}  // namespace

at::Tensor rms_norm(const at::Tensor& input, const at::Tensor& weight, double eps) {
  return rms_norm_kernel(input, weight, eps);
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
  ops.def("rms_norm(Tensor hidden_states, Tensor weight, float eps) -> Tensor");
  ops.impl("rms_norm", c10::DispatchKey::Autograd, &rms_norm_autograd);
  for (const auto key : {c10::DispatchKey::CPU
#if defined(CUDA_KERNEL)
                         , c10::DispatchKey::CUDA
#endif
       }) {
    ops.impl("rms_norm", key, &rms_norm);
  }
}

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
