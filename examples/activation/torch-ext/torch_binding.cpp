#include <ATen/MemoryOverlap.h>
#include <ATen/EmptyTensor.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#if defined(CUDA_KERNEL)
#include <ATen/cuda/EmptyTensor.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "activation.h"
#include "registration.h"
#include "torch_binding.h"

namespace {

int dtype_code(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return ACT_FLOAT32;
    case at::kHalf: return ACT_FLOAT16;
    case at::kBFloat16: return ACT_BFLOAT16;
    default: return -1;
  }
}

// A new contiguous tensor straight from the device's allocator: at::empty would go through the
// dispatcher once more, a few microseconds of host time per call.
at::Tensor new_empty(at::IntArrayRef sizes, const at::Tensor& like) {
#if defined(CUDA_KERNEL)
  if (like.is_cuda()) return at::detail::empty_cuda(sizes, like.scalar_type(), like.device(), std::nullopt);
#endif
  if (like.is_cpu()) return at::detail::empty_cpu(sizes, like.scalar_type());
  return at::empty(sizes, like.options());
}

void check_dtype(const char* op, const at::Tensor& input) {
  TORCH_CHECK_TYPE(dtype_code(input.scalar_type()) >= 0, op,
                   ": x must be float32, float16 or bfloat16, got ", input.scalar_type());
}

void check_common(const char* op, const at::Tensor& out, const at::Tensor& input) {
  check_dtype(op, input);
  TORCH_CHECK_TYPE(out.scalar_type() == input.scalar_type(), op, ": out must have x's dtype ",
                   input.scalar_type(), ", got ", out.scalar_type());
  TORCH_CHECK_VALUE(out.device() == input.device(), op, ": x is on ", input.device(),
                    " but out is on ", out.device());
  TORCH_CHECK_VALUE(at::has_internal_overlap(out) != at::MemOverlap::Yes, op,
                    ": out has elements that share memory");
}

// Views `t` as rows of its last dimension: true when that dimension is
// contiguous and the leading ones collapse into a single row stride.
bool row_view(const at::Tensor& t, int64_t& rows, int64_t& stride) {
  const int64_t n = t.dim();
  rows = 1;
  stride = n > 0 ? t.size(-1) : 1;
  if (n > 0 && t.size(-1) > 1 && t.stride(-1) != 1) return false;
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

// Runs `kind` from `in` into `out`; the last dimension of `out` is `d`.
// Inputs that are not row-strided are made contiguous; such outputs get a
// contiguous temporary that is copied back.
void run(const char* op, int kind, at::Tensor& out, const at::Tensor& input, int64_t d) {
  const int64_t n = out.numel();
  if (n == 0) return;
  at::Tensor in = input;
  at::Tensor dst = out;
  ActShape s{};
  if (kind != ACT_SILU_AND_MUL && in.is_contiguous() && dst.is_contiguous()) {
    s = ActShape{1, n, n, n};
  } else {
    int64_t rows = 0, in_stride = 0, out_stride = 0;
    if (!row_view(in, rows, in_stride)) {
      in = input.contiguous();
      row_view(in, rows, in_stride);
    }
    if (!row_view(dst, rows, out_stride)) {
      dst = at::empty(out.sizes(), out.options());
      row_view(dst, rows, out_stride);
    }
    s = ActShape{rows, d, out_stride, in_stride};
  }
  const int dtype = dtype_code(in.scalar_type());
  void* o = dst.data_ptr();
  const void* x = in.const_data_ptr();
  if (dst.is_cpu()) {
    constexpr int64_t kGrain = 1 << 14;
    at::parallel_for(0, s.rows * s.d, kGrain, [&](int64_t begin, int64_t end) {
      activation_cpu(kind, dtype, o, x, s, begin, end);
    });
  } else {
#if defined(CUDA_KERNEL)
    const c10::cuda::CUDAGuard guard(dst.device());
    const int err = activation_cuda_launch(kind, dtype, o, x, s,
                                           c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == 0, op, ": CUDA kernel launch failed with error ", err);
#else
    TORCH_CHECK(false, op, ": this build has no kernel for device ", dst.device());
#endif
  }
  if (!dst.is_same(out)) out.copy_(dst);
}

void elementwise(const char* op, int kind, at::Tensor& out, const at::Tensor& input) {
  check_common(op, out, input);
  TORCH_CHECK_VALUE(out.sizes() == input.sizes(), op, ": out must have shape ", input.sizes(),
                    ", got ", out.sizes());
  at::assert_no_partial_overlap(out, input);
  run(op, kind, out, input, input.dim() > 0 ? input.size(-1) : 1);
}

std::vector<int64_t> gated_shape(const char* op, const at::Tensor& input) {
  TORCH_CHECK_VALUE(input.dim() >= 1 && input.size(-1) % 2 == 0, op,
                    ": the last dimension of x must be even, got shape ", input.sizes());
  std::vector<int64_t> shape = input.sizes().vec();
  shape.back() /= 2;
  return shape;
}

void gated(const char* op, at::Tensor& out, const at::Tensor& input) {
  check_common(op, out, input);
  const std::vector<int64_t> expected = gated_shape(op, input);
  TORCH_CHECK_VALUE(out.sizes() == at::IntArrayRef(expected), op, ": out must have shape ",
                    at::IntArrayRef(expected), " (x with the last dimension halved), got ",
                    out.sizes());
  at::assert_no_overlap(out, input);
  run(op, ACT_SILU_AND_MUL, out, input, expected.back());
}

// The functional forms allocate their (contiguous) output: one call from Python, no
// torch.empty there.
at::Tensor elementwise_functional(const char* op, int kind, const at::Tensor& input) {
  check_dtype(op, input);
  at::Tensor out = new_empty(input.sizes(), input);
  run(op, kind, out, input, input.dim() > 0 ? input.size(-1) : 1);
  return out;
}

}  // namespace

void gelu_fast(at::Tensor& out, const at::Tensor& input) {
  elementwise("gelu_fast", ACT_GELU_FAST, out, input);
}
void gelu_tanh(at::Tensor& out, const at::Tensor& input) {
  elementwise("gelu_tanh", ACT_GELU_TANH, out, input);
}
void gelu(at::Tensor& out, const at::Tensor& input) {
  elementwise("gelu", ACT_GELU, out, input);
}
void silu_and_mul(at::Tensor& out, const at::Tensor& input) {
  gated("silu_and_mul", out, input);
}

at::Tensor gelu_fast_functional(const at::Tensor& input) {
  return elementwise_functional("gelu_fast", ACT_GELU_FAST, input);
}
at::Tensor gelu_tanh_functional(const at::Tensor& input) {
  return elementwise_functional("gelu_tanh", ACT_GELU_TANH, input);
}
at::Tensor gelu_functional(const at::Tensor& input) {
  return elementwise_functional("gelu", ACT_GELU, input);
}
at::Tensor silu_and_mul_functional(const at::Tensor& input) {
  check_dtype("silu_and_mul", input);
  const std::vector<int64_t> shape = gated_shape("silu_and_mul", input);
  at::Tensor out = new_empty(shape, input);
  run("silu_and_mul", ACT_SILU_AND_MUL, out, input, shape.back());
  return out;
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
  ops.def("gelu_fast(Tensor! out, Tensor input) -> ()");
  ops.def("gelu_tanh(Tensor! out, Tensor input) -> ()");
  ops.def("gelu(Tensor! out, Tensor input) -> ()");
  ops.def("silu_and_mul(Tensor! out, Tensor input) -> ()");
  ops.def("gelu_fast_functional(Tensor input) -> Tensor");
  ops.def("gelu_tanh_functional(Tensor input) -> Tensor");
  ops.def("gelu_functional(Tensor input) -> Tensor");
  ops.def("silu_and_mul_functional(Tensor input) -> Tensor");
  for (const auto key : {c10::DispatchKey::CPU
#if defined(CUDA_KERNEL)
                         , c10::DispatchKey::CUDA
#endif
       }) {
    ops.impl("gelu_fast", key, &gelu_fast);
    ops.impl("gelu_tanh", key, &gelu_tanh);
    ops.impl("gelu", key, &gelu);
    ops.impl("silu_and_mul", key, &silu_and_mul);
    ops.impl("gelu_fast_functional", key, &gelu_fast_functional);
    ops.impl("gelu_tanh_functional", key, &gelu_tanh_functional);
    ops.impl("gelu_functional", key, &gelu_functional);
    ops.impl("silu_and_mul_functional", key, &silu_and_mul_functional);
  }
}

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
