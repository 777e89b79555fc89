// Torch-free kernel interface: raw pointers, sizes, strides and a stream.
#pragma once
#include <cstdint>

// Element types (the binding maps torch dtypes to these).
enum RmsDType : int { RMS_FLOAT32 = 0, RMS_FLOAT16 = 1, RMS_BFLOAT16 = 2 };

// `rows` rows of `n` elements. Row r of the input starts at x + r * x_stride (elements), the
// output is contiguous (row r at out + r * n); the weight has n elements. Each row:
//   y = round(w * round(x * rsqrt(sum(x^2) * inv_n + eps)))
// in float32, rounding to the input's type, as transformers' LlamaRMSNorm does.
// The weight has the input's type or is float32.
struct RmsShape {
  int64_t rows;
  int64_t n;
  int64_t x_stride;
};

// Rows [begin, end).
void rms_norm_cpu(int dtype, int weight_dtype, void* out, const void* x, const void* weight,
                  RmsShape shape, float inv_n, float eps, int64_t begin, int64_t end);

// Launches the whole computation on `stream` (a cudaStream_t).
// Returns 0 on success, otherwise the cudaError_t of the launch.
int rms_norm_cuda_launch(int dtype, int weight_dtype, void* out, const void* x,
                         const void* weight, RmsShape shape, float inv_n, float eps,
                         void* stream);
