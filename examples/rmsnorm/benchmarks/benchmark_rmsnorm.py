"""Benchmark of the RMSNorm kernel against F.rms_norm, transformers' float32-variance RMSNorm and torch.compile.

    python benchmarks/benchmark_rmsnorm.py --variant-dir DIR --out DIR [--device cuda|cpu] [--quick]

(`kbuild bench examples/rmsnorm` builds the kernel and runs this.) Loads the kernel through
`kernels.get_local_kernel(DIR)`; DIR is a built variant, a folder of variants or a project.

Bandwidth cases (rows x hidden): 4096x4096, 16384x8192, 65536x4096, bfloat16, eps 1e-6, calls
back to back (inputs rotating through copies larger than the L2), plus the single call with
the L2 flushed. Latency cases (decode sizes): rows 1, 8, 32, 128 x hidden 2048, 4096, 8192 and
32x256, per-call wall clock back to back, host work included.
Bytes = x read + out written + weight read = 2*rows*hidden*elsize + hidden*elsize.
Implementations, each checked against a float32 RMSNorm before it is timed:
- ours:       `rms_norm(x, weight, eps)` (the compiled CUDA or CPU kernel);
- layer:      our `LlamaRMSNorm` layer's forward on a module holding the weight (what a
              kernelized model calls; latency cases);
- F.rms_norm: `torch.nn.functional.rms_norm(x, (hidden,), weight, eps)`;
- eager:      transformers' LlamaRMSNorm forward (float32 variance, 7 PyTorch ops):
              x32 = x.float(); x32 * rsqrt(mean(x32^2) + eps), cast back, times weight;
- compile:    torch.compile of that eager implementation, one static-shape compile per case
              (bandwidth cases only: a compiled single op at decode sizes mostly measures the
              compiled wrapper's host cost, not what a compiled model pays).
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

SHAPES = [(4096, 4096), (16384, 8192), (65536, 4096)]
SHAPES_CUDA_QUICK = [(4096, 4096)]
SHAPES_CPU = [(1024, 4096)]
SHAPES_CPU_QUICK = [(64, 1024)]
DECODE = [(rows, hidden) for hidden in (2048, 4096, 8192) for rows in (1, 8, 32, 128)] + [(32, 256)]
DECODE_QUICK = [(1, 4096), (32, 256)]
DECODE_CPU = [(1, 2048), (32, 4096)]
DECODE_CPU_QUICK = [(1, 256)]


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


class _Norm(torch.nn.Module):
    """What kernelize hands our layer's forward: a module with weight and variance_epsilon."""

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.weight = torch.nn.Parameter(weight, requires_grad=False)
        self.variance_epsilon = EPS


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
        decode = DECODE_QUICK if args.quick else DECODE
    else:
        shapes = SHAPES_CPU_QUICK if args.quick else SHAPES_CPU
        decode = DECODE_CPU_QUICK if args.quick else DECODE_CPU
    use_compile = not args.no_compile and not (args.quick and not cuda)
    if not use_compile:
        suite.skipped["compile"] = "--no-compile" if args.no_compile else "--quick on the CPU"
    has_f_rms_norm = hasattr(F, "rms_norm")
    if not has_f_rms_norm:
        suite.skipped["F.rms_norm"] = f"not in torch {torch.__version__}"
    layer_forward = kernel.layers.LlamaRMSNorm.forward

    dtype = DTYPES[args.dtype]
    tol = TOL[dtype]
    gen = torch.Generator(device=suite.device).manual_seed(42)
    cases = [(s, "bandwidth") for s in shapes] + [(s, "latency") for s in decode]
    for (rows, hidden), kind in cases:
        x = torch.randn(rows, hidden, dtype=dtype, device=suite.device, generator=gen)
        w = (1 + 0.1 * torch.randn(hidden, device=suite.device, generator=gen)).to(dtype)
        ref = float32_rms_norm(x, w)
        # Bandwidth cases read a different copy of x each call (none of it in the L2).
        next_x = bl.input_cycle(x) if kind == "bandwidth" else (lambda x=x: x)
        norm = _Norm(w)

        def close(r, ref=ref):
            return bl.compare(r, ref, atol=tol, rtol=tol)

        impls = [bl.prepare("ours", lambda: kernel.rms_norm(next_x(), w, EPS), close)]
        if kind == "latency":
            impls.append(bl.prepare("layer", lambda: layer_forward(norm, next_x()), close,
                                    note="our LlamaRMSNorm layer's forward"))
        if has_f_rms_norm:
            impls.append(bl.prepare("F.rms_norm", lambda: F.rms_norm(next_x(), (hidden,), w, EPS),
                                    close))
        impls.append(bl.prepare("eager", lambda: llama_rms_norm(next_x(), w), close,
                                note="float32 variance (transformers' LlamaRMSNorm)"))
        if use_compile and kind == "bandwidth":
            compiled, why = bl.compile_fn(llama_rms_norm, True)
            if compiled is None:
                impls.append(bl.Impl("compile", lambda: None, ok=False, error=why))
            else:
                impls.append(bl.prepare("compile", lambda: compiled(next_x(), w), close,
                                        note="torch.compile of the eager implementation"))
        nbytes = 2 * x.numel() * x.element_size() + w.numel() * w.element_size()
        suite.run_case(f"{rows}x{hidden}", nbytes, impls, shape=(rows, hidden), dtype=dtype,
                       kind=kind)
        x = w = ref = impls = next_x = norm = None  # free this case's memory
        if cuda:
            torch.cuda.empty_cache()
    return bl.finish(suite, args.out)


if __name__ == "__main__":
    sys.exit(main())
