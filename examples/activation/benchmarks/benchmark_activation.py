"""Benchmark of the activation kernels against PyTorch eager and torch.compile.

    python benchmarks/benchmark_activation.py --variant-dir DIR --out DIR [--device cuda|cpu] [--quick]

(`kbuild bench examples/activation` builds the kernel and runs this.) Loads the kernel through
`kernels.get_local_kernel(DIR)`; DIR is a built variant, a folder of variants or a project.

Bandwidth cases: gelu_fast, gelu_tanh, gelu and silu_and_mul at 2^20, 2^24 and 2^28 output
elements (rows of 4096), float16 and bfloat16, calls back to back (inputs rotating through
copies larger than the L2), plus the single call with the L2 flushed. Latency cases (decode
sizes): rows 1, 8, 32, 128 x hidden 2048, 4096, 8192 output elements per row, bfloat16,
per-call wall clock back to back, host work included. silu_and_mul reads twice as many
input elements. Bytes = input read + output written (gelu*: 2*n*elsize; silu_and_mul:
3*n*elsize).
Implementations, each checked against eager PyTorch before it is timed:
- ours:    the op, writing into a preallocated `out` (`kernel.gelu_tanh(out, x)`);
- layer:   our layer's forward (`layers.GeluTanh`, `layers.SiluAndMul`, ...: one functional op
           that allocates its output), what a kernelized model calls (latency cases);
- eager:   F.gelu(x, approximate="tanh") (gelu_fast, gelu_tanh), F.gelu(x) (gelu),
           F.silu(x[..., :d]) * x[..., d:] (silu_and_mul: what a model runs unfused);
- compile: torch.compile of the same function, one static-shape compile per case (bandwidth
           cases only).
Writes <out>/activation.json and <out>/activation.png and prints the table, with the copy
bandwidth measured in the same run. `kernels benchmark` runs the `Benchmark` classes below.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from kernels.benchmark import Benchmark

PROJECT = Path(__file__).resolve().parents[1]
BYTES = "input read + output written: gelu* 2*n*elsize, silu_and_mul (2n in, n out) 3*n*elsize"
HIDDEN = 4096
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
TOL = {torch.float16: 1e-2, torch.bfloat16: 2e-2, torch.float32: 1e-4}


def gelu_tanh_ref(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


def gelu_ref(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x)


def silu_and_mul_ref(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]


# op -> (PyTorch reference, input elements per output element, our layer)
OPS = {
    "gelu_fast": (gelu_tanh_ref, 1, "GeluFast"),
    "gelu_tanh": (gelu_tanh_ref, 1, "GeluTanh"),
    "gelu": (gelu_ref, 1, "Gelu"),
    "silu_and_mul": (silu_and_mul_ref, 2, "SiluAndMul"),
}
DECODE_ROWS = (1, 8, 32, 128)
DECODE_HIDDEN = (2048, 4096, 8192)


# --- kernels' runner (`kernels benchmark`) ---------------------------------------------------

class SiluAndMulBenchmark(Benchmark):
    seed = 42

    def setup(self):
        dtype = torch.float16 if self.device == "cuda" else torch.float32
        tokens, d = (8 * 2048, 4096) if self.device == "cuda" else (256, 1024)
        self.x = torch.randn(tokens, 2 * d, device=self.device, dtype=dtype)
        self.out = torch.empty(tokens, d, device=self.device, dtype=dtype)

    def benchmark_silu_and_mul(self):
        self.kernel.silu_and_mul(self.out, self.x)

    def verify_silu_and_mul(self) -> torch.Tensor:
        return silu_and_mul_ref(self.x)


class GeluTanhBenchmark(Benchmark):
    seed = 42

    def setup(self):
        dtype = torch.float16 if self.device == "cuda" else torch.float32
        shape = (8 * 2048, 4096) if self.device == "cuda" else (256, 1024)
        self.x = torch.randn(shape, device=self.device, dtype=dtype)
        self.out = torch.empty_like(self.x)

    def benchmark_gelu_tanh(self):
        self.kernel.gelu_tanh(self.out, self.x)

    def verify_gelu_tanh(self) -> torch.Tensor:
        return gelu_tanh_ref(self.x)


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


def shapes_for(n: int, ratio: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """(input shape, output shape) for n output elements in rows of HIDDEN."""
    rows, cols = (n // HIDDEN, HIDDEN) if n >= HIDDEN else (1, n)
    return (rows, cols * ratio), (rows, cols)


def main(argv: list[str] | None = None) -> int:
    bl = _benchlib()
    p = bl.arg_parser(__doc__.splitlines()[0])
    p.add_argument("--op", nargs="+", choices=list(OPS), default=list(OPS))
    p.add_argument("--dtype", nargs="+", choices=list(DTYPES), default=list(DTYPES))
    args = p.parse_args(argv)
    suite = bl.setup(args, "activation", BYTES)
    cuda = suite.device == "cuda"
    kernel = bl.load_kernel(args.variant_dir, suite.device, PROJECT)
    suite.variant = bl.variant_name(kernel)
    suite.measure_copy()

    if cuda:
        exponents = [20] if args.quick else [20, 24, 28]
        decode = [(1, 4096)] if args.quick else [(r, h) for h in DECODE_HIDDEN for r in DECODE_ROWS]
    else:
        exponents = [12] if args.quick else [16, 20]
        decode = [(1, 256)] if args.quick else [(1, 2048), (32, 4096)]
    use_compile = not args.no_compile and not (args.quick and not cuda)
    if not use_compile:
        suite.skipped["compile"] = "--no-compile" if args.no_compile else "--quick on the CPU"

    gen = torch.Generator(device=suite.device).manual_seed(42)

    def run(op, dtype, in_shape, out_shape, case, kind):
        ref_fn, _, layer_name = OPS[op]
        fn = getattr(kernel, op)
        layer = getattr(kernel.layers, layer_name)()
        tol = TOL[dtype]
        x = torch.randn(in_shape, dtype=dtype, device=suite.device, generator=gen)
        out = torch.empty(out_shape, dtype=dtype, device=suite.device)
        ref = ref_fn(x)
        next_x = bl.input_cycle(x) if kind == "bandwidth" else (lambda: x)

        def close(r):
            return bl.compare(r, ref, atol=tol, rtol=tol)

        impls = [bl.prepare("ours", lambda: fn(out, next_x()), close)]
        if kind == "latency":
            impls.append(bl.prepare("layer", lambda: layer.forward(next_x()), close,
                                    note=f"layers.{layer_name}"))
        impls.append(bl.prepare("eager", lambda: ref_fn(next_x()), close))
        if use_compile and kind == "bandwidth":
            compiled, why = bl.compile_fn(ref_fn, True)
            if compiled is None:
                impls.append(bl.Impl("compile", lambda: None, ok=False, error=why))
            else:
                impls.append(bl.prepare("compile", lambda: compiled(next_x()), close))
        nbytes = (x.numel() + out.numel()) * x.element_size()
        suite.run_case(case, nbytes, impls, shape=in_shape, dtype=dtype, group=op, kind=kind)

    for op in args.op:
        ratio = OPS[op][1]
        for dtype_name in args.dtype:
            short = {"float16": "fp16", "bfloat16": "bf16"}[dtype_name]
            for k in exponents:
                in_shape, out_shape = shapes_for(2 ** k, ratio)
                run(op, DTYPES[dtype_name], in_shape, out_shape, f"2^{k} {short}", "bandwidth")
                if cuda:
                    torch.cuda.empty_cache()
        dtype_name = "bfloat16" if "bfloat16" in args.dtype else args.dtype[0]
        for rows, hidden in decode:
            run(op, DTYPES[dtype_name], (rows, hidden * ratio), (rows, hidden),
                f"{rows}x{hidden} {'bf16' if dtype_name == 'bfloat16' else 'fp16'}", "latency")
    return bl.finish(suite, args.out)


if __name__ == "__main__":
    sys.exit(main())
