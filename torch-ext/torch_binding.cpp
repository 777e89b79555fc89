#include <ATen/Parallel.h>
#include <torch/library.h>

#if defined(CUDA_KERNEL)
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "img2gray.h"
#include "registration.h"
#include "torch_binding.h"

namespace {

void check_args(const at::Tensor& input, const at::Tensor& output) {
  TORCH_CHECK(input.scalar_type() == at::kByte, "img2gray: input must be uint8, got ",
              input.scalar_type());
  TORCH_CHECK(output.scalar_type() == at::kByte, "img2gray: output must be uint8, got ",
              output.scalar_type());
  TORCH_CHECK(input.dim() == 3 && input.size(2) == 3,
              "img2gray: input must have shape (H, W, 3), got ", input.sizes());
  TORCH_CHECK(output.dim() == 2 && output.size(0) == input.size(0) &&
                  output.size(1) == input.size(1),
              "img2gray: output must have shape (H, W) = (", input.size(0), ", ", input.size(1),
              "), got ", output.sizes());
  TORCH_CHECK(input.is_contiguous() && output.is_contiguous(),
              "img2gray: input and output must be contiguous");
  TORCH_CHECK(input.device() == output.device(), "img2gray: input on ", input.device(),
              " but output on ", output.device());
}

}  // namespace

void img2gray_cpu(const at::Tensor& input, at::Tensor& output) {
  check_args(input, output);
  const uint8_t* rgb = input.data_ptr<uint8_t>();
  uint8_t* gray = output.data_ptr<uint8_t>();
  constexpr int64_t kGrain = 1 << 16;
  at::parallel_for(0, output.numel(), kGrain, [&](int64_t begin, int64_t end) {
    img2gray_cpu_range(rgb, gray, begin, end);
  });
}

#if defined(CUDA_KERNEL)
void img2gray_cuda(const at::Tensor& input, at::Tensor& output) {
  check_args(input, output);
  const c10::cuda::CUDAGuard guard(input.device());
  const int err = img2gray_cuda_launch(input.data_ptr<uint8_t>(), output.data_ptr<uint8_t>(),
                                       output.numel(),
                                       c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "img2gray: CUDA kernel launch failed with error ", err);
}
#endif

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
  ops.def("img2gray(Tensor input, Tensor! output) -> ()");
  ops.impl("img2gray", c10::kCPU, &img2gray_cpu);
#if defined(CUDA_KERNEL)
  ops.impl("img2gray", c10::kCUDA, &img2gray_cuda);
#endif
}

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
