"""Benchmark of the img2gray kernel against PyTorch eager, torch.compile and a naive CUDA kernel.

    python benchmarks/benchmark_img2gray.py --variant-dir DIR --out DIR [--device cuda|cpu] [--quick]

(`kbuild bench .` builds the kernel and runs this.) Loads the kernel through
`kernels.get_local_kernel(DIR)`; DIR is a built variant, a folder of variants or a project.

Bandwidth cases: 1080x1920, 4096^2, 8192^2, 16384^2 and two widths that are not multiples of
16 (8191x8191, 4095x4097), uint8 RGB in, uint8 gray out, calls back to back (inputs rotating
through copies larger than the L2), plus the single call with the L2 flushed. Latency cases:
small images (32x32, 224x224, 512x512), per-call wall clock back to back, host work included.
Bytes = 3*H*W read + H*W written.
Implementations, each checked against the eager result before it is timed:
- ours:    the kernel (`img2gray_out` into a preallocated output);
- eager:   `x = rgb.float(); (x[...,0]*0.21 + x[...,1]*0.72 + x[...,2]*0.07).to(torch.uint8)`;
- compile: `torch.compile` of the same function (uint8 in, uint8 out; allowed to differ by 1
           where Triton contracts a multiply-add into an FMA; bandwidth cases only);
- naive:   the one-thread-per-pixel design: a CuPy RawKernel on a 2-D grid of 16x16 blocks,
           one pixel per thread, launched on torch's current stream (CUDA only).
Writes <out>/img2gray.json and <out>/img2gray.png and prints the table, with the copy
bandwidth measured in the same run. `kernels benchmark` runs `Img2GrayBenchmark` below.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from kernels.benchmark import Benchmark

PROJECT = Path(__file__).resolve().parents[1]
BYTES = "3*H*W (RGB uint8 read) + H*W (gray uint8 written)"

SHAPES = [(1080, 1920), (4096, 4096), (8192, 8192), (16384, 16384), (8191, 8191), (4095, 4097)]
SHAPES_CUDA_QUICK = [(1080, 1920), (4095, 4097)]
SHAPES_CPU = [(1080, 1920), (2048, 2048), (1023, 517)]
SHAPES_CPU_QUICK = [(64, 96), (31, 33)]
SMALL = [(32, 32), (224, 224), (512, 512)]
SMALL_QUICK = [(224, 224)]


def gray_reference(rgb: torch.Tensor) -> torch.Tensor:
    x = rgb.float()
    return (x[..., 0] * 0.21 + x[..., 1] * 0.72 + x[..., 2] * 0.07).to(torch.uint8)


# --- kernels' runner (`kernels benchmark`) ---------------------------------------------------

class Img2GrayBenchmark(Benchmark):
    seed = 42

    def setup(self):
        h, w = (8192, 8192) if self.device == "cuda" else (1080, 1920)
        self.x = torch.randint(0, 256, (h, w, 3), dtype=torch.uint8, device=self.device)
        self.out = torch.empty((h, w), dtype=torch.uint8, device=self.device)

    def benchmark_img2gray(self):
        self.kernel.img2gray_out(self.x, self.out)

    def verify_img2gray(self) -> torch.Tensor:
        return gray_reference(self.x)


# --- the one-thread-per-pixel baseline ------------------------------------------------------

NAIVE_SRC = r"""
extern "C" __global__ void img2gray_naive(const unsigned char* __restrict__ rgb,
                                          unsigned char* __restrict__ gray,
                                          int width, int height) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= width || y >= height) return;
  const long long i = (long long)y * width + x;
  const float r = rgb[3 * i], g = rgb[3 * i + 1], b = rgb[3 * i + 2];
  // No FMA contraction, as PyTorch's reference: the outputs must be equal.
  const float v = __fadd_rn(__fadd_rn(__fmul_rn(0.21f, r), __fmul_rn(0.72f, g)),
                            __fmul_rn(0.07f, b));
  gray[i] = (unsigned char)v;
}
"""


def naive_kernel():
    """A launcher `f(rgb, out) -> out` (CuPy RawKernel), or (None, why not)."""
    try:
        import cupy
        import numpy as np
    except Exception as e:
        return None, f"cupy unavailable ({type(e).__name__}: {e})"
    try:
        kern = cupy.RawKernel(NAIVE_SRC, "img2gray_naive")
        kern.compile()
    except Exception as e:
        return None, f"RawKernel failed ({type(e).__name__}: {e})"[:300]

    def launch(rgb: torch.Tensor, out: torch.Tensor, _cache={}):
        key = (rgb.data_ptr(), out.data_ptr(), tuple(rgb.shape))
        if key not in _cache:  # wrap once per buffer pair (zero-copy views)
            if len(_cache) > 256:
                _cache.clear()
            _cache[key] = (cupy.asarray(rgb), cupy.asarray(out))
        a, o = _cache[key]
        h, w = rgb.shape[0], rgb.shape[1]
        ptr = torch.cuda.current_stream().cuda_stream
        stream = cupy.cuda.ExternalStream(ptr) if ptr else cupy.cuda.Stream.null
        with stream:
            kern(((w + 15) // 16, (h + 15) // 16), (16, 16), (a, o, np.int32(w), np.int32(h)))
        return out

    return launch, None


# --- standalone runner ----------------------------------------------------------------------

def _benchlib():
    try:
        from kbuild_bench import harness as benchlib
    except ImportError:  # run from a checkout without kbuild installed
        for parent in Path(__file__).resolve().parents:
            if (parent / "tools" / "kbuild_bench").is_dir():
                sys.path.insert(0, str(parent / "tools"))
                break
        from kbuild_bench import harness as benchlib
    return benchlib


def main(argv: list[str] | None = None) -> int:
    bl = _benchlib()
    args = bl.arg_parser(__doc__.splitlines()[0]).parse_args(argv)
    suite = bl.setup(args, "img2gray", BYTES)
    cuda = suite.device == "cuda"
    kernel = bl.load_kernel(args.variant_dir, suite.device, PROJECT)
    suite.variant = bl.variant_name(kernel)
    suite.measure_copy()

    if cuda:
        shapes = SHAPES_CUDA_QUICK if args.quick else SHAPES
        naive, why = naive_kernel()
        if naive is None:
            suite.skipped["naive"] = why
    else:
        shapes = SHAPES_CPU_QUICK if args.quick else SHAPES_CPU
        naive = None
        suite.skipped["naive"] = "CUDA only"
    use_compile = not args.no_compile and not (args.quick and not cuda)
    if not use_compile:
        suite.skipped["compile"] = "--no-compile" if args.no_compile else "--quick on the CPU"

    small = SMALL_QUICK if args.quick else SMALL
    gen = torch.Generator(device=suite.device).manual_seed(42)
    cases = [(shape, "bandwidth") for shape in shapes] + [(shape, "latency") for shape in small]
    for (h, w), kind in cases:
        x = torch.randint(0, 256, (h, w, 3), dtype=torch.uint8, device=suite.device, generator=gen)
        ref = gray_reference(x)
        next_x = bl.input_cycle(x) if kind == "bandwidth" else (lambda x=x: x)

        def exact(r, ref=ref):
            return bl.compare(r, ref)

        out = torch.empty((h, w), dtype=torch.uint8, device=suite.device)
        impls = [bl.prepare("ours", lambda: kernel.img2gray_out(next_x(), out), exact),
                 bl.prepare("eager", lambda: gray_reference(next_x()), exact)]
        if use_compile and kind == "bandwidth":
            compiled, why = bl.compile_fn(gray_reference, True)
            if compiled is None:
                impls.append(bl.Impl("compile", lambda: None, ok=False, error=why))
            else:
                impls.append(bl.prepare("compile", lambda: compiled(next_x()),
                                        lambda r: bl.compare(r, ref, atol=1),
                                        note="checked to within 1 (FMA contraction)"))
        if naive is not None:
            out2 = torch.empty((h, w), dtype=torch.uint8, device=suite.device)
            impls.append(bl.prepare("naive", lambda: naive(next_x(), out2), exact,
                                    note="CuPy RawKernel, 16x16 blocks, 1 pixel/thread"))
        suite.run_case(f"{h}x{w}", 4 * h * w, impls, shape=(h, w, 3), dtype=torch.uint8,
                       kind=kind)
        x = ref = out = out2 = impls = next_x = None  # free the case's memory before the next
        if cuda:
            torch.cuda.empty_cache()
    return bl.finish(suite, args.out)


if __name__ == "__main__":
    sys.exit(main())
