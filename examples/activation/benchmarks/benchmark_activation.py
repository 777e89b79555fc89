"""Benchmarks of the activation kernel.

- `kernels benchmark <repo dir>` runs the `Benchmark` classes below (kernels' own runner).
- `python benchmarks/benchmark_activation.py [--repo DIR | --build] [--device cuda|cpu]
  [--json FILE]` times the kernel against PyTorch eager and torch.compile (CUDA events on a
  GPU, perf_counter on CPU), prints a table and writes JSON. `--quick` is a CPU smoke run.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from kernels.benchmark import Benchmark

PROJECT = Path(__file__).resolve().parents[1]
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def silu_and_mul_ref(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]


# op -> (PyTorch reference, output shape from input shape)
OPS = {
    "gelu_fast": (lambda x: F.gelu(x, approximate="tanh"), lambda s: s),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), lambda s: s),
    "gelu": (lambda x: F.gelu(x), lambda s: s),
    "silu_and_mul": (silu_and_mul_ref, lambda s: (*s[:-1], s[-1] // 2)),
}


# --- kernels' runner -------------------------------------------------------------------

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
        return F.gelu(self.x, approximate="tanh")


# --- standalone runner -----------------------------------------------------------------

def timed(fn, device: str, warmup: int, iters: int) -> dict:
    for _ in range(warmup):
        fn()
    times = []
    if device == "cuda":
        torch.cuda.synchronize()
        for _ in range(iters):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    else:
        for _ in range(iters):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return {"median_ms": statistics.median(times), "min_ms": min(times),
            "mean_ms": statistics.fmean(times)}


def load_kernel(repo: Path | None, build: bool, device: str):
    from kernels import get_local_kernel

    if build:
        from kbuild.pipeline import build as kbuild

        repo = Path(tempfile.mkdtemp(prefix="activation-bench-"))
        kbuild(PROJECT, build_dir=repo / "build")
    repo = repo or PROJECT
    if not (repo / "build").is_dir():
        sys.exit(f"no build/ in {repo}: run `kbuild build {repo}` or pass --build")
    return get_local_kernel(repo, backend="cuda" if device == "cuda" else "cpu")


def run(kernel, device: str, dtypes: list[str], shapes: list[tuple], ops: list[str],
        warmup: int, iters: int, compile_ref: bool) -> list[dict]:
    rows = []
    for op in ops:
        ref, out_shape = OPS[op]
        fn = getattr(kernel, op)
        compiled = torch.compile(ref, dynamic=False) if compile_ref else None
        for dtype_name in dtypes:
            dtype = DTYPES[dtype_name]
            for shape in shapes:
                torch.manual_seed(42)
                x = torch.randn(shape, device=device, dtype=dtype)
                out = torch.empty(out_shape(shape), device=device, dtype=dtype)
                fn(out, x)
                tol = 1e-5 if dtype == torch.float32 else 1e-2
                torch.testing.assert_close(out, ref(x), rtol=tol, atol=tol)
                moved = (x.numel() + out.numel()) * x.element_size()
                row = {"op": op, "dtype": dtype_name, "shape": list(shape), "bytes": moved,
                       "kernel": timed(lambda: fn(out, x), device, warmup, iters),
                       "eager": timed(lambda: ref(x), device, warmup, iters)}
                if compiled is not None:
                    row["compile"] = timed(lambda: compiled(x), device, warmup, iters)
                for k in ("kernel", "eager", "compile"):
                    if k in row:
                        row[k]["gbps"] = moved / row[k]["median_ms"] / 1e6
                rows.append(row)
    return rows


def print_table(rows: list[dict]) -> None:
    head = f"{'op':<13}{'dtype':<10}{'shape':<18}{'kernel ms':>10}{'GB/s':>8}{'eager ms':>10}" \
           f"{'compile ms':>11}{'vs eager':>9}{'vs compile':>11}"
    print(head)
    for r in rows:
        k, e, c = r["kernel"]["median_ms"], r["eager"]["median_ms"], r.get("compile", {})
        cm = c.get("median_ms")
        print(f"{r['op']:<13}{r['dtype']:<10}{'x'.join(map(str, r['shape'])):<18}{k:>10.4f}"
              f"{r['kernel']['gbps']:>8.1f}{e:>10.4f}{(f'{cm:.4f}' if cm else '-'):>11}"
              f"{e / k:>8.2f}x{(f'{cm / k:.2f}x' if cm else '-'):>11}")


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repo", type=Path, help="dir holding build/<variant> (default: the project)")
    p.add_argument("--build", action="store_true", help="build the kernel into a temp dir first")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", nargs="+", default=None, choices=list(DTYPES))
    p.add_argument("--op", nargs="+", default=list(OPS), choices=list(OPS))
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile baseline")
    p.add_argument("--quick", action="store_true", help="tiny shapes and few iterations (smoke)")
    p.add_argument("--json", type=Path, default=Path("benchmark_activation.json"))
    args = p.parse_args(argv)

    if args.quick:
        shapes, args.warmup, args.iters = [(8, 256)], 1, 3
    elif args.device == "cuda":
        shapes = [(2048, 4096), (16384, 4096), (4096, 14336)]
    else:
        shapes = [(64, 1024), (256, 4096)]
    dtypes = args.dtype or (["float32"] if args.quick else list(DTYPES))
    kernel = load_kernel(args.repo, args.build, args.device)
    rows = run(kernel, args.device, dtypes, shapes, args.op, args.warmup, args.iters,
               not args.no_compile)
    print_table(rows)
    device_name = (torch.cuda.get_device_name() if args.device == "cuda"
                   else platform.processor() or platform.machine())
    result = {"kernel": kernel.__name__, "device": args.device, "device_name": device_name,
              "torch": torch.__version__, "timer": "cuda-events" if args.device == "cuda"
              else "perf_counter", "results": rows}
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json}")
    return result


if __name__ == "__main__":
    main()
