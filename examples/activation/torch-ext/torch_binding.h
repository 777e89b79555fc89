#pragma once

#include <ATen/Tensor.h>

// Each op writes its result into `out` (same dtype and device as `input`). One function per op
// serves every device: it picks the CPU or CUDA kernel from the tensors' device.
void gelu_fast(at::Tensor& out, const at::Tensor& input);
void gelu_tanh(at::Tensor& out, const at::Tensor& input);
void gelu(at::Tensor& out, const at::Tensor& input);
void silu_and_mul(at::Tensor& out, const at::Tensor& input);

// The same, into a new contiguous tensor (silu_and_mul: the last dimension halved).
at::Tensor gelu_fast_functional(const at::Tensor& input);
at::Tensor gelu_tanh_functional(const at::Tensor& input);
at::Tensor gelu_functional(const at::Tensor& input);
at::Tensor silu_and_mul_functional(const at::Tensor& input);
