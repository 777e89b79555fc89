#pragma once

#include <ATen/Tensor.h>

// Each op writes its result into `out` (same dtype and device as `input`).
void gelu_fast_cpu(at::Tensor& out, const at::Tensor& input);
void gelu_tanh_cpu(at::Tensor& out, const at::Tensor& input);
void gelu_cpu(at::Tensor& out, const at::Tensor& input);
void silu_and_mul_cpu(at::Tensor& out, const at::Tensor& input);

#if defined(CUDA_KERNEL)
void gelu_fast_cuda(at::Tensor& out, const at::Tensor& input);
void gelu_tanh_cuda(at::Tensor& out, const at::Tensor& input);
void gelu_cuda(at::Tensor& out, const at::Tensor& input);
void silu_and_mul_cuda(at::Tensor& out, const at::Tensor& input);
#endif
