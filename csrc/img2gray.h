// Torch-free kernel interface: raw pointers, a pixel count and a stream.
#pragma once
#include <cstdint>

// Weights of the luma conversion: gray = 0.21 R + 0.72 G + 0.07 B, truncated.
#define IMG2GRAY_WR 0.21f
#define IMG2GRAY_WG 0.72f
#define IMG2GRAY_WB 0.07f

// Converts pixels [begin, end) of a packed RGB uint8 buffer to gray.
void img2gray_cpu_range(const uint8_t* rgb, uint8_t* gray, int64_t begin, int64_t end);

// Launches the conversion of `pixels` packed RGB pixels on `stream` (a cudaStream_t).
// Returns 0 on success, otherwise the cudaError_t of the launch.
int img2gray_cuda_launch(const uint8_t* rgb, uint8_t* gray, int64_t pixels, void* stream);
