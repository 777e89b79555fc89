#pragma once

#include <ATen/Tensor.h>

void img2gray_cpu(const at::Tensor& input, at::Tensor& output);

#if defined(CUDA_KERNEL)
void img2gray_cuda(const at::Tensor& input, at::Tensor& output);
#endif
