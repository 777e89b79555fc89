#pragma once

#include <ATen/Tensor.h>

// y = weight * (x / sqrt(mean(x^2, -1) + eps)) over the last dimension, in float32, rounded
// to the input's dtype as transformers' LlamaRMSNorm does. One function serves every device.
at::Tensor rms_norm(const at::Tensor& input, const at::Tensor& weight, double eps);
