"""Shared harness of the kernel benchmarks (`benchmarks/benchmark_*.py`, `kbuild bench`): the one
interface their scripts use (`from kbuild_bench import harness`).

Two kinds of case, each timing all implementations of the case in the same run (timing.py):

- bandwidth (large tensors): calls back to back, timed by the wall clock, inputs rotating through
  copies larger than the L2; as an extra column, the single call with the L2 flushed.
- latency (decode sizes): the same back-to-back timing on small tensors, where the per-call cost
  is mostly host work; no flush, no rotation (a model's small activations are in the L2 anyway).

Bandwidth: each benchmark states its byte count (the fewest bytes the op must move: every
input read once, every output written once); GB/s = bytes / per-call time / 1e9. The ceiling
is `copy_bandwidth`: a device-to-device copy of 1 GiB measured in the same run, its bytes
counted as read + written (2 GiB). `x_copy` = GB/s / copy GB/s.

A result is a dict: run metadata, `copy`, and `rows`, one row per (case, impl):
    kernel, group, case, kind ("bandwidth" / "latency"), shape, dtype, impl, median_ms
    (back to back, per call), min_ms, mean_ms, reps (calls timed), bytes, gbps, x_copy,
    flushed_ms, flushed_gbps, flushed_x_copy (bandwidth cases on CUDA), speedup (other impl ->
    its median / this median, same case), ok, max_abs_err, note, error
`write_json` and `print_table` (report.py) and `plot` (plot.py: GB/s and per-call time per impl
per case) take it.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from .plot import plot
from .report import OURS, fmt, print_table, write_json
from .stats import Timing, gbps, speedups
from .timing import (B2B_ROUNDS, B2B_TARGET_MS, ROTATE_BYTES, ROUNDS, copy_bandwidth, input_cycle,
                     time_back_to_back, time_fn, time_interleaved)

__all__ = ["OURS", "Impl", "Suite", "Timing", "arg_parser", "compare", "compile_fn", "copy_bandwidth",
           "finish", "gbps", "input_cycle", "load_kernel", "plot", "prepare", "print_table", "setup",
           "time_back_to_back", "time_fn", "time_interleaved", "variant_name", "write_json"]


# --- verification --------------------------------------------------------------------------

def compare(out: torch.Tensor, ref: torch.Tensor, *, atol: float = 0.0,
            rtol: float = 0.0) -> tuple[bool, float]:
    """(all |out - ref| <= atol + rtol * |ref| and NaNs alike, max |out - ref|)."""
    if out.shape != ref.shape:
        return False, float("inf")
    if out.numel() == 0:
        return True, 0.0
    a = out.detach().to(torch.float32)
    b = ref.detach().to(torch.float32)
    nan_a, nan_b = torch.isnan(a), torch.isnan(b)
    if not torch.equal(nan_a, nan_b):
        return False, float("nan")
    diff = (a - b).abs().masked_fill_(nan_a, 0.0)
    ok = bool((diff <= atol + rtol * b.abs().masked_fill_(nan_b, 0.0)).all())
    return ok, float(diff.max())


# --- one benchmark run ---------------------------------------------------------------------

@dataclass
class Impl:
    """One implementation of a case: `fn` is timed; `ok`/`max_abs_err` come from verification."""
    name: str
    fn: Callable[[], Any]
    ok: bool = True
    max_abs_err: float | None = None
    note: str = ""
    error: str | None = None


@dataclass
class Suite:
    kernel: str
    device: str
    reps: int = 50
    warmup: int = 10
    rounds: int = B2B_ROUNDS
    bytes_formula: str = ""
    quick: bool = False
    variant: str | None = None
    copy: dict = field(default_factory=dict)
    rows: list[dict] = field(default_factory=list)
    skipped: dict = field(default_factory=dict)

    def measure_copy(self, nbytes: int | None = None) -> dict:
        if self.quick and nbytes is None and torch.device(self.device).type != "cuda":
            nbytes = 32 << 20
        self.copy = copy_bandwidth(self.device, nbytes, reps=self.reps, warmup=self.warmup)
        print(f"copy bandwidth ({self.copy['nbytes'] >> 20} MiB device-to-device, bytes read "
              f"+ written): {self.copy['gbps']:.1f} GB/s", flush=True)
        return self.copy

    def run_case(self, case: str, nbytes: int, impls: list[Impl], *, shape=None, dtype=None,
                 group: str | None = None, kind: str = "bandwidth") -> list[dict]:
        """Times every impl of one case and appends its rows (speedups within the case).

        kind "bandwidth": back to back, plus the flushed single call on CUDA; "latency":
        back to back only (decode sizes)."""
        copy_gbps = self.copy.get("gbps")
        cuda = torch.device(self.device).type == "cuda"
        rows = []
        runnable = []
        for impl in impls:
            row = {"kernel": self.kernel, "group": group, "case": case, "kind": kind,
                   "shape": list(shape) if shape is not None else None,
                   "dtype": str(dtype).removeprefix("torch.") if dtype is not None else None,
                   "impl": impl.name, "median_ms": None, "min_ms": None, "mean_ms": None,
                   "reps": None, "bytes": nbytes, "gbps": None, "x_copy": None,
                   "flushed_ms": None, "flushed_gbps": None, "flushed_x_copy": None,
                   "speedup": {}, "ok": impl.ok and impl.error is None,
                   "max_abs_err": impl.max_abs_err, "note": impl.note, "error": impl.error}
            if impl.error is None:
                try:  # a baseline that breaks must not stop the run
                    impl.fn()
                    runnable.append((impl, row))
                except Exception as e:
                    row.update(ok=False, error=f"{type(e).__name__}: {e}"[:500])
            rows.append(row)
        fns = [impl.fn for impl, _ in runnable]
        try:
            timings = time_back_to_back(fns, self.device, rounds=self.rounds, warmup=self.warmup)
            flushed = (time_interleaved(fns, self.device, reps=self.reps, warmup=1)
                       if kind == "bandwidth" and cuda else [None] * len(fns))
        except Exception as e:
            timings, flushed = [], []
            for _, row in runnable:
                row.update(ok=False, error=f"{type(e).__name__}: {e}"[:500])
        for (impl, row), t, f in zip(runnable, timings, flushed):
            row.update(median_ms=t.median_ms, min_ms=t.min_ms, mean_ms=t.mean_ms, reps=t.reps,
                       gbps=gbps(nbytes, t.median_ms))
            if f is not None:
                row.update(flushed_ms=f.median_ms, flushed_gbps=gbps(nbytes, f.median_ms))
            if copy_gbps:
                row["x_copy"] = row["gbps"] / copy_gbps
                if row["flushed_gbps"]:
                    row["flushed_x_copy"] = row["flushed_gbps"] / copy_gbps
        for row in rows:
            label = f"{group} {case}" if group else case
            per_call = fmt(row["median_ms"] and row["median_ms"] * 1e3, ".2f")
            print(f"  {label:<28} {row['impl']:<12} {per_call:>10} us/call "
                  f"{fmt(row['gbps'], '.1f'):>8} GB/s"
                  f"{'' if row['ok'] else '  FAILED ' + (row['error'] or 'verification')}",
                  flush=True)
        speedups(rows)
        self.rows.extend(rows)
        return rows

    def command(self) -> str:
        script = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "benchmark.py"
        return (f"python benchmarks/{script} --variant-dir VARIANT --out OUT --device "
                f"{torch.device(self.device).type}" + (" --quick" if self.quick else "")
                + (f" --reps {self.reps}" if self.reps != (5 if self.quick else 50) else ""))

    def result(self) -> dict:
        dev = torch.device(self.device)
        if dev.type == "cuda":
            props = torch.cuda.get_device_properties(dev)
            device_name = props.name
            extra = {"sms": props.multi_processor_count,
                     "l2_bytes": getattr(props, "L2_cache_size", None),
                     "cuda": torch.version.cuda}
        else:
            device_name = platform.processor() or platform.machine()
            extra = {"threads": torch.get_num_threads()}
        try:
            import triton
            triton_version = triton.__version__
        except Exception:
            triton_version = None
        return {
            "kernel": self.kernel, "device": dev.type, "device_name": device_name, **extra,
            "torch": torch.__version__, "triton": triton_version,
            "python": platform.python_version(), "variant": self.variant,
            "timer": (f"wall clock per call, calls back to back (batches of >= {B2B_TARGET_MS} ms "
                      f"between device syncs, median of {self.rounds} batches, implementations "
                      "interleaved; bandwidth cases rotate inputs through "
                      f"{ROTATE_BYTES >> 20} MiB of copies); flushed column: CUDA events around "
                      f"one call after a 512 MiB read, median, {ROUNDS} interleaved rounds"
                      if dev.type == "cuda" else
                      "wall clock per call, calls back to back, median of batches"),
            "reps": self.reps, "warmup": self.warmup, "rounds": self.rounds,
            "quick": self.quick,
            "command": self.command(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "bytes_formula": self.bytes_formula, "copy": self.copy,
            "skipped": self.skipped, "rows": self.rows,
        }

    @property
    def failed(self) -> list[dict]:
        return [r for r in self.rows if not r["ok"]]



# --- shared command line -------------------------------------------------------------------

def arg_parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--variant-dir", type=Path, default=None,
                   help="A built variant (build/<variant>), a folder of variants, or a project "
                        "holding build/<variant>; default: the kernel project itself.")
    p.add_argument("--out", type=Path, default=Path("bench-results"),
                   help="Folder for <kernel>.json and <kernel>.png.")
    p.add_argument("--device", choices=["cuda", "cpu"], default=None,
                   help="Default: cuda when available.")
    p.add_argument("--quick", action="store_true", help="Few small cases, few reps (smoke).")
    p.add_argument("--reps", type=int, default=None, help="Timed calls per impl (default 50).")
    p.add_argument("--warmup", type=int, default=None, help="Untimed calls first (default 10).")
    p.add_argument("--no-compile", action="store_true", help="Skip the torch.compile baselines.")
    return p


def setup(args: argparse.Namespace, kernel: str, bytes_formula: str) -> Suite:
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda but torch sees no CUDA device")
    reps = args.reps or (5 if args.quick else 50)
    warmup = args.warmup or (2 if args.quick else 10)
    rounds = 5 if args.quick else B2B_ROUNDS
    if args.device == "cpu" and args.quick:
        reps, warmup, rounds = min(reps, 3), min(warmup, 1), 3
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
    # One torch.compile per case (static shapes): lift the recompile limit.
    for name in ("recompile_limit", "cache_size_limit"):
        try:
            from torch import _dynamo
            setattr(_dynamo.config, name, 256)
        except Exception:
            pass
    return Suite(kernel=kernel, device=args.device, reps=reps, warmup=warmup, rounds=rounds,
                 bytes_formula=bytes_formula, quick=args.quick)


def load_kernel(variant_dir: Path | None, device: str, project: Path):
    """The kernel module through `kernels.get_local_kernel` (a variant, build dir or project)."""
    from kernels import get_local_kernel

    path = (variant_dir or project).resolve()
    backend = "cuda" if device == "cuda" else "cpu"
    module = get_local_kernel(path, backend=backend)
    return module


def variant_name(module) -> str | None:
    """The name of the variant folder (the one with metadata.json) the module was loaded from."""
    f = getattr(module, "__file__", None)
    if not f:
        return None
    for parent in Path(f).resolve().parents:
        if (parent / "metadata.json").is_file():
            return parent.name
    return None


def compile_fn(fn: Callable, enabled: bool) -> tuple[Callable | None, str | None]:
    """A fresh torch.compile of `fn` (dynamo state reset: each case compiles on its own)."""
    if not enabled:
        return None, "disabled (--no-compile)"
    try:
        from torch import _dynamo
        _dynamo.reset()
        return torch.compile(fn, dynamic=False), None
    except Exception as e:
        return None, f"{type(e).__name__}: {e}"[:300]


def prepare(impl_name: str, fn: Callable[[], Any], check: Callable[[Any], tuple[bool, float]],
            note: str = "") -> Impl:
    """Runs `fn` once (compiling, for torch.compile), verifies its output, returns the Impl."""
    impl = Impl(impl_name, fn, note=note)
    try:
        t0 = time.perf_counter()
        result = fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        first = time.perf_counter() - t0
        impl.ok, impl.max_abs_err = check(result)
        if first > 1.0:
            impl.note = (impl.note + "; " if impl.note else "") + f"first call {first:.1f}s"
    except Exception as e:
        impl.ok, impl.error = False, f"{type(e).__name__}: {e}"[:500]
    return impl


def finish(suite: Suite, out_dir: Path) -> int:
    """Writes JSON + PNG, prints the table; exit status 1 when any impl failed."""
    result = suite.result()
    path = write_json(result, out_dir)
    png = plot(result, out_dir)
    print_table(result)
    print(f"wrote {path}" + (f" and {png}" if png else ""))
    bad = suite.failed
    for r in bad:
        print(f"FAILED: {r['kernel']} {r['group'] or ''} {r['case']} {r['impl']}: "
              f"{r['error'] or 'output differs from the reference (max |err| ' + str(r['max_abs_err']) + ')'}",
              file=sys.stderr)
    return 1 if bad else 0
