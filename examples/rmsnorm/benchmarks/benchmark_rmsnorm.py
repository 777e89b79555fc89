"""Benchmarks of the rmsnorm kernel.

- `kernels benchmark <repo dir>` runs the `Benchmark` class below (kernels' own runner).
- `python benchmarks/benchmark_rmsnorm.py [--repo DIR | --build] [--device cuda|cpu]
  [--json FILE]` times the kernel against PyTorch eager (transformers' LlamaRMSNorm) and
  torch.compile (CUDA events on a GPU, perf_counter on CPU), prints a table and writes
  JSON. `--quick` is a CPU smoke run.
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

from kernels.benchmark import Benchmark

PROJECT = Path(__file__).resolve().parents[1]
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
EPS = 1e-6


def llama_rms_norm(hidden_states: torch.Tensor, weight: torch.Tensor, eps: float = EPS):
    input_dtype = hidden_states.dtype
    hidden_states = hidden_states.to(torch.float32)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + eps)
    return weight * hidden_states.to(input_dtype)


# --- kernels' runner -------------------------------------------------------------------

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

        repo = Path(tempfile.mkdtemp(prefix="rmsnorm-bench-"))
        kbuild(PROJECT, build_dir=repo / "build")
    repo = repo or PROJECT
    if not (repo / "build").is_dir():
        sys.exit(f"no build/ in {repo}: run `kbuild build {repo}` or pass --build")
    return get_local_kernel(repo, backend="cuda" if device == "cuda" else "cpu")


def run(kernel, device: str, dtypes: list[str], shapes: list[tuple], warmup: int, iters: int,
        compile_ref: bool) -> list[dict]:
    rows = []
    compiled = torch.compile(llama_rms_norm, dynamic=False) if compile_ref else None
    for dtype_name in dtypes:
        dtype = DTYPES[dtype_name]
        for shape in shapes:
            torch.manual_seed(42)
            x = torch.randn(shape, device=device, dtype=dtype)
            w = torch.rand(shape[-1], device=device, dtype=dtype)
            y = kernel.rms_norm(x, w, EPS)
            tol = 1e-5 if dtype == torch.float32 else 1e-2
            torch.testing.assert_close(y, llama_rms_norm(x, w), rtol=tol, atol=tol)
            moved = 2 * x.numel() * x.element_size() + w.numel() * w.element_size()
            row = {"op": "rms_norm", "dtype": dtype_name, "shape": list(shape), "bytes": moved,
                   "kernel": timed(lambda: kernel.rms_norm(x, w, EPS), device, warmup, iters),
                   "eager": timed(lambda: llama_rms_norm(x, w), device, warmup, iters)}
            if compiled is not None:
                row["compile"] = timed(lambda: compiled(x, w), device, warmup, iters)
            for k in ("kernel", "eager", "compile"):
                if k in row:
                    row[k]["gbps"] = moved / row[k]["median_ms"] / 1e6
            rows.append(row)
    return rows


def print_table(rows: list[dict]) -> None:
    print(f"{'dtype':<10}{'shape':<16}{'kernel ms':>10}{'GB/s':>8}{'eager ms':>10}"
          f"{'compile ms':>11}{'vs eager':>9}{'vs compile':>11}")
    for r in rows:
        k, e, c = r["kernel"]["median_ms"], r["eager"]["median_ms"], r.get("compile", {})
        cm = c.get("median_ms")
        print(f"{r['dtype']:<10}{'x'.join(map(str, r['shape'])):<16}{k:>10.4f}"
              f"{r['kernel']['gbps']:>8.1f}{e:>10.4f}{(f'{cm:.4f}' if cm else '-'):>11}"
              f"{e / k:>8.2f}x{(f'{cm / k:.2f}x' if cm else '-'):>11}")


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repo", type=Path, help="dir holding build/<variant> (default: the project)")
    p.add_argument("--build", action="store_true", help="build the kernel into a temp dir first")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", nargs="+", default=None, choices=list(DTYPES))
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile baseline")
    p.add_argument("--quick", action="store_true", help="tiny shapes and few iterations (smoke)")
    p.add_argument("--json", type=Path, default=Path("benchmark_rmsnorm.json"))
    args = p.parse_args(argv)

    if args.quick:
        shapes, args.warmup, args.iters = [(8, 256)], 1, 3
    elif args.device == "cuda":
        shapes = [(2048, 4096), (16384, 4096), (4096, 8192), (32768, 2048)]
    else:
        shapes = [(64, 1024), (512, 4096)]
    dtypes = args.dtype or (["float32"] if args.quick else list(DTYPES))
    kernel = load_kernel(args.repo, args.build, args.device)
    rows = run(kernel, args.device, dtypes, shapes, args.warmup, args.iters, not args.no_compile)
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
