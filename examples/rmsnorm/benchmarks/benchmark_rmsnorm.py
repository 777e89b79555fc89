"""Benchmark of the RMSNorm kernel against F.rms_norm, a float32-variance eager RMSNorm and torch.compile.

    python benchmarks/benchmark_rmsnorm.py --variant-dir DIR --out DIR [--device cuda|cpu] [--quick]

(`kbuild bench examples/rmsnorm` builds the kernel and runs this.) Loads the kernel through
`kernels.get_local_kernel(DIR)`; DIR is a built variant, a folder of variants or a project.

Cases: (rows x hidden) 32x256, 4096x4096, 16384x8192, 65536x4096, bfloat16, eps 1e-6.
Bytes = x read + out written + weight read = 2*rows*hidden*elsize + hidden*elsize.
Implementations, each checked against a float32 RMSNorm before it is timed:
- ours:       `rms_norm(x, weight, eps)` (Triton on CUDA, PyTorch on the CPU);
- F.rms_norm: `torch.nn.functional.rms_norm(x, (hidden,), weight, eps)`;
- eager:      the float32-variance implementation (transformers' LlamaRMSNorm):
              x32 = x.float(); x32 * rsqrt(mean(x32^2) + eps), cast back, times weight;
- compile:    torch.compile of that eager implementation, one static-shape compile per case.
Writes <out>/rmsnorm.json and <out>/rmsnorm.png and prints the table, with the copy
bandwidth measured in the same run. `kernels benchmark` runs `RMSNormBenchmark` below.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from kernels.benchmark import Benchmark

PROJECT = Path(__file__).resolve().parents[1]
BYTES = "x read + out written + weight read: 2*rows*hidden*elsize + hidden*elsize"
EPS = 1e-6
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
TOL = {torch.float16: 1e-2, torch.bfloat16: 2e-2, torch.float32: 1e-4}

SHAPES = [(32, 256), (4096, 4096), (16384, 8192), (65536, 4096)]
SHAPES_CUDA_QUICK = [(32, 256), (4096, 4096)]
SHAPES_CPU = [(32, 256), (1024, 4096)]
SHAPES_CPU_QUICK = [(32, 256), (64, 1024)]


def llama_rms_norm(hidden_states: torch.Tensor, weight: torch.Tensor, eps: float = EPS):
    input_dtype = hidden_states.dtype
    hidden_states = hidden_states.to(torch.float32)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + eps)
    return weight * hidden_states.to(input_dtype)


def float32_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """The verification reference: everything in float32, one rounding at the end."""
    x32 = x.float()
    y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * weight.float()
    return y.to(x.dtype)


# --- kernels' runner (`kernels benchmark`) ---------------------------------------------------

class RMSNormBenchmark(Benchmark):
    seed = 42

    def setup(self):
        dtype = torch.bfloat16 if self.device == "cuda" else torch.float32
        tokens, hidden = (16384, 4096) if self.device == "cuda" else (256, 1024)
        self.x = torch.randn(tokens, hidden, device=self.device, dtype=dtype)
        self.w = torch.rand(hidden, device=self.device, dtype=dtype)
        self.out = None

    def benchmark_rms_norm(self):
        self.out = self.kernel.rms_norm(self.x, self.w, EPS)

    def verify_rms_norm(self) -> torch.Tensor:
        return llama_rms_norm(self.x, self.w)


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
    p = bl.arg_parser(__doc__.splitlines()[0])
    p.add_argument("--dtype", choices=list(DTYPES), default="bfloat16")
    args = p.parse_args(argv)
    suite = bl.setup(args, "rmsnorm", BYTES)
    cuda = suite.device == "cuda"
    kernel = bl.load_kernel(args.variant_dir, suite.device, PROJECT)
    suite.variant = bl.variant_name(kernel)
    suite.measure_copy()

    if cuda:
        shapes = SHAPES_CUDA_QUICK if args.quick else SHAPES
    else:
        shapes = SHAPES_CPU_QUICK if args.quick else SHAPES_CPU
    use_compile = not args.no_compile and not (args.quick and not cuda)
    if not use_compile:
        suite.skipped["compile"] = "--no-compile" if args.no_compile else "--quick on the CPU"
    has_f_rms_norm = hasattr(F, "rms_norm")
    if not has_f_rms_norm:
        suite.skipped["F.rms_norm"] = f"not in torch {torch.__version__}"

    dtype = DTYPES[args.dtype]
    tol = TOL[dtype]
    gen = torch.Generator(device=suite.device).manual_seed(42)
    for rows, hidden in shapes:
        x = torch.randn(rows, hidden, dtype=dtype, device=suite.device, generator=gen)
        w = (1 + 0.1 * torch.randn(hidden, device=suite.device, generator=gen)).to(dtype)
        ref = float32_rms_norm(x, w)

        def close(r, ref=ref):
            return bl.compare(r, ref, atol=tol, rtol=tol)

        impls = [bl.prepare("ours", lambda: kernel.rms_norm(x, w, EPS), close)]
        if has_f_rms_norm:
            impls.append(bl.prepare("F.rms_norm", lambda: F.rms_norm(x, (hidden,), w, EPS), close))
        impls.append(bl.prepare("eager", lambda: llama_rms_norm(x, w), close,
                                note="float32 variance (LlamaRMSNorm)"))
        if use_compile:
            compiled, why = bl.compile_fn(llama_rms_norm, True)
            if compiled is None:
                impls.append(bl.Impl("compile", lambda: None, ok=False, error=why))
            else:
                impls.append(bl.prepare("compile", lambda: compiled(x, w), close,
                                        note="torch.compile of the eager implementation"))
        nbytes = 2 * x.numel() * x.element_size() + w.numel() * w.element_size()
        suite.run_case(f"{rows}x{hidden}", nbytes, impls, shape=(rows, hidden), dtype=dtype)
        x = w = ref = impls = None  # free this case's memory
        if cuda:
            torch.cuda.empty_cache()
    return bl.finish(suite, args.out)


if __name__ == "__main__":
    sys.exit(main())
