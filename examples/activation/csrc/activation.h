// Torch-free kernel interface: raw pointers, sizes, strides and a stream.
#pragma once
#include <cstdint>

// Element types (the binding maps torch dtypes to these).
enum ActDType : int { ACT_FLOAT32 = 0, ACT_FLOAT16 = 1, ACT_BFLOAT16 = 2 };

// Activations. The GELUs are element-wise; SILU_AND_MUL reads rows of 2*d
// elements [gate | up] and writes silu(gate) * up (d elements).
enum ActKind : int { ACT_GELU_FAST = 0, ACT_GELU_TANH = 1, ACT_GELU = 2, ACT_SILU_AND_MUL = 3 };

// `rows` rows of `d` output elements. Row r of the output starts at
// out + r * out_stride, of the input at in + r * in_stride (strides in
// elements); elements inside a row are contiguous.
struct ActShape {
  int64_t rows;
  int64_t d;
  int64_t out_stride;
  int64_t in_stride;
};

// Computes output elements [begin, end) of the rows * d outputs.
void activation_cpu(int kind, int dtype, void* out, const void* in, ActShape shape,
                    int64_t begin, int64_t end);

// Launches the whole computation on `stream` (a cudaStream_t).
// Returns 0 on success, otherwise the cudaError_t of the launch.
int activation_cuda_launch(int kind, int dtype, void* out, const void* in, ActShape shape,
                           void* stream);
