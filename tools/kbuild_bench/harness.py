"""Shared harness of the kernel benchmarks (`benchmarks/benchmark_*.py`, `kbuild bench`).

Two kinds of case, each timing all implementations of the case in the same run:

- bandwidth (large tensors): calls issued back to back, as a model issues its ops, and timed
  by the wall clock (`time_back_to_back`): a batch of calls between two device
  synchronisations, long enough (>= B2B_TARGET_MS) that the synchronisation is negligible;
  the per-call figure is the batch time over its calls, the median over B2B_ROUNDS batches,
  implementations interleaved round by round. Host work (Python, dispatch, launch) counts
  whenever it is longer than the device's, exactly as in a model. Inputs rotate through copies
  that together exceed the L2 several times (`input_cycle`), so each call reads its input from
  device memory. As an extra column, the single call with the L2 flushed (`time_interleaved`):
  CUDA events around one call, a 512 MiB buffer read before it (evicts the inputs from the
  60 MB L2 and leaves only clean lines there); that figure hides host cost, because the flush
  keeps the GPU busy while the host submits the call.
- latency (decode sizes): the same back-to-back wall-clock timing on small tensors, where the
  per-call cost is mostly host work; no flush, no rotation (a model's small activations are in
  the L2 anyway).

On the CPU, the same back-to-back timing with no synchronisation.

Bandwidth: each benchmark states its byte count (the fewest bytes the op must move: every
input read once, every output written once); GB/s = bytes / per-call time / 1e9. The ceiling
is `copy_bandwidth`: a device-to-device copy of 1 GiB measured in the same run, its bytes
counted as read + written (2 GiB). `x_copy` = GB/s / copy GB/s.

A result is a dict: run metadata, `copy`, and `rows`, one row per (case, impl):
    kernel, group, case, kind ("bandwidth" / "latency"), shape, dtype, impl, median_ms
    (back to back, per call), min_ms, mean_ms, reps (calls timed), bytes, gbps, x_copy,
    flushed_ms, flushed_gbps, flushed_x_copy (bandwidth cases on CUDA), speedup (other impl ->
    its median / this median, same case), ok, max_abs_err, note, error
`write_json`, `plot` (PNG: GB/s and per-call time per impl per case) and `print_table` take it.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import math
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

FLUSH_BYTES = 512 << 20
COPY_BYTES_CUDA = 1 << 30
COPY_BYTES_CPU = 128 << 20
OURS = "ours"

_flush_buffers: dict[str, torch.Tensor] = {}


# --- timing --------------------------------------------------------------------------------

@dataclass
class Timing:
    median_ms: float
    min_ms: float
    mean_ms: float
    reps: int


def _flush_buffer(device: torch.device) -> torch.Tensor:
    key = str(device)
    if key not in _flush_buffers:
        _flush_buffers[key] = torch.zeros(FLUSH_BYTES // 4, dtype=torch.int32, device=device)
    return _flush_buffers[key]


def _samples(fn: Callable[[], Any], device: torch.device, n: int, flush: bool) -> list[float]:
    """n timed calls of fn (ms each), no warm-up."""
    if device.type == "cuda":
        buf = _flush_buffer(device) if flush else None
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        torch.cuda.synchronize(device)
        for i in range(n):
            if buf is not None:
                buf.sum()  # reads 512 MiB: the L2 holds none of fn's data, and no dirty lines
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize(device)
        return [s.elapsed_time(e) for s, e in zip(starts, ends)]
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def _timing(times: list[float]) -> Timing:
    return Timing(statistics.median(times), min(times), statistics.fmean(times), len(times))


def time_fn(fn: Callable[[], Any], device: str | torch.device, *, reps: int = 50,
            warmup: int = 10, flush: bool = True) -> Timing:
    """Median time of `fn()` in ms: CUDA events on a CUDA device, perf_counter elsewhere."""
    device = torch.device(device)
    for _ in range(max(1, warmup)):
        fn()
    return _timing(_samples(fn, device, reps, flush))


SHORT_MS = 0.05      # a call shorter than this on CUDA is timed SHORT_REPS times instead
SHORT_REPS = 400
ROUNDS = 5


def time_interleaved(fns: list[Callable[[], Any]], device: str | torch.device, *,
                     reps: int = 50, warmup: int = 10, flush: bool = True) -> list[Timing]:
    """Times several implementations of one case in ROUNDS rounds, each round timing every fn
    in turn, so that a drift of clocks or memory state during the case reaches them all alike.
    On CUDA, cases whose calls all take under SHORT_MS get SHORT_REPS samples each (their
    spread is a large part of the figure; the flush dominates the cost anyway)."""
    device = torch.device(device)
    for fn in fns:
        for _ in range(max(1, warmup)):
            fn()
    samples: list[list[float]] = [[] for _ in fns]

    def rounds(total: int) -> None:
        per_round = max(1, -(-total // ROUNDS))
        for _ in range(ROUNDS):
            for i, fn in enumerate(fns):
                samples[i].extend(_samples(fn, device, per_round, flush))

    rounds(reps)
    short = device.type == "cuda" and all(statistics.median(t) < SHORT_MS for t in samples)
    if short and reps < SHORT_REPS:
        rounds(SHORT_REPS - len(samples[0]))
    return [_timing(t) for t in samples]


B2B_TARGET_MS = 2.0   # a batch of back-to-back calls lasts at least this long
B2B_ROUNDS = 15
B2B_MAX_CALLS = 4000
ROTATE_BYTES = 256 << 20  # inputs of bandwidth cases rotate through this many bytes of copies


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _batch_ms(fn: Callable[[], Any], device: torch.device, calls: int) -> float:
    """Wall-clock ms per call of `calls` calls issued back to back between two syncs."""
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    _sync(device)
    return (time.perf_counter() - t0) * 1e3 / calls


def time_back_to_back(fns: list[Callable[[], Any]], device: str | torch.device, *,
                      rounds: int = B2B_ROUNDS, warmup: int = 10,
                      target_ms: float = B2B_TARGET_MS) -> list[Timing]:
    """Per-call wall-clock time of each fn called back to back (host work included).

    Each fn gets a batch size that makes a batch last at least `target_ms`; then `rounds`
    rounds time one batch of every fn in turn. Timing = median / min / mean over the rounds."""
    device = torch.device(device)
    for fn in fns:
        for _ in range(max(1, warmup)):
            fn()
    calls = []
    for fn in fns:
        n = 1
        while True:
            ms = _batch_ms(fn, device, n) * n
            if ms >= target_ms or n >= B2B_MAX_CALLS:
                break
            n = min(B2B_MAX_CALLS, max(2 * n, int(n * 1.2 * target_ms / max(ms, 1e-3))))
        calls.append(n)
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            samples[i].append(_batch_ms(fn, device, calls[i]))
    return [Timing(statistics.median(t), min(t), statistics.fmean(t), len(t) * n)
            for t, n in zip(samples, calls)]


def input_cycle(t: torch.Tensor, total_bytes: int = ROTATE_BYTES,
                limit: int = 64) -> Callable[[], torch.Tensor]:
    """A function returning `t` and equal copies of it in turn: enough copies (on CUDA) that
    together they exceed the L2 several times, so a call issued right after another reads its
    input from device memory rather than from the cache."""
    copies = [t]
    if t.device.type == "cuda":
        nbytes = max(1, t.numel() * t.element_size())
        copies += [t.clone() for _ in range(min(limit, -(-total_bytes // nbytes)) - 1)]
    return itertools.cycle(copies).__next__


def gbps(nbytes: int, ms: float) -> float:
    return nbytes / ms / 1e6 if ms > 0 else float("nan")


def copy_bandwidth(device: str | torch.device, nbytes: int | None = None, *, reps: int = 50,
                   warmup: int = 10) -> dict:
    """Device-to-device copy of `nbytes` (1 GiB on CUDA): bytes counted = read + written."""
    device = torch.device(device)
    if nbytes is None:
        nbytes = COPY_BYTES_CUDA if device.type == "cuda" else COPY_BYTES_CPU
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).random_(0, 256)
    dst = torch.empty_like(src)
    t = time_fn(lambda: dst.copy_(src), device, reps=reps, warmup=warmup, flush=False)
    src = dst = None
    if device.type == "cuda":
        torch.cuda.empty_cache()
    moved = 2 * nbytes
    return {"nbytes": nbytes, "bytes": moved, "bytes_formula": "2 * nbytes (read + written)",
            "median_ms": t.median_ms, "min_ms": t.min_ms, "reps": t.reps,
            "gbps": gbps(moved, t.median_ms)}


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
            per_call = _fmt(row["median_ms"] and row["median_ms"] * 1e3, ".2f")
            print(f"  {label:<28} {row['impl']:<12} {per_call:>10} us/call "
                  f"{_fmt(row['gbps'], '.1f'):>8} GB/s"
                  f"{'' if row['ok'] else '  FAILED ' + (row['error'] or 'verification')}",
                  flush=True)
        for row in rows:
            for other in rows:
                if other is not row and row["median_ms"] and other["median_ms"]:
                    row["speedup"][other["impl"]] = other["median_ms"] / row["median_ms"]
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


# --- output --------------------------------------------------------------------------------

def _fmt(v, spec: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return format(v, spec)


def write_json(result: dict, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{result['kernel']}.json"
    path.write_text(json.dumps(result, indent=1, allow_nan=True) + "\n")
    return path


def _bars(ax, rows: list[dict], impls: list[str], colors: dict, value, label_of) -> float:
    """Grouped bars of value(row) per case and impl; returns the tallest bar."""
    cases = list(dict.fromkeys(r["case"] for r in rows))
    bar = 0.8 / len(impls)
    top = 1e-9
    for j, name in enumerate(impls):
        xs, ys = [], []
        for i, case in enumerate(cases):
            for r in rows:
                if r["case"] == case and r["impl"] == name and value(r):
                    xs.append(i + (j - (len(impls) - 1) / 2) * bar)
                    ys.append(value(r))
        if xs:
            ax.bar(xs, ys, bar, label=name, color=colors[name],
                   edgecolor="black" if name == OURS else None)
            top = max(top, *ys)
    for i, case in enumerate(cases):
        for r in rows:
            if r["case"] == case and r["impl"] == OURS and value(r) and label_of(r):
                j = impls.index(OURS)
                ax.text(i + (j - (len(impls) - 1) / 2) * bar, value(r) + 0.01 * top,
                        label_of(r), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels(cases, rotation=20 if len(cases) > 4 else 0, fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return top


def plot(result: dict, out_dir: Path) -> Path | None:
    """PNG: per group, GB/s back to back per impl and case (copy as a line), and the per-call
    time at decode sizes."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # plotting is optional
        print(f"no plot: matplotlib unavailable ({e})", file=sys.stderr)
        return None
    rows = result["rows"]
    if not rows:
        return None
    panels = list(dict.fromkeys((r["group"], r.get("kind", "bandwidth")) for r in rows))
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    colors = {name: f"C{i}" for i, name in enumerate(impls)}
    ncases = max(len({r["case"] for r in rows if (r["group"], r.get("kind", "bandwidth")) == p})
                 for p in panels)
    width = max(7.0, 0.35 * ncases * (len(impls) + 1) + 2)
    fig, axes = plt.subplots(len(panels), 1, figsize=(width, 3.4 * len(panels)), squeeze=False)
    copy_gbps = result.get("copy", {}).get("gbps")
    for ax, (group, kind) in zip(axes[:, 0], panels):
        prow = [r for r in rows if (r["group"], r.get("kind", "bandwidth")) == (group, kind)]
        pimpls = [i for i in impls if any(r["impl"] == i for r in prow)]
        where = f"{result['kernel']}{' ' + group if group else ''} on {result['device_name']}"
        if kind == "latency":
            top = _bars(ax, prow, pimpls, colors, lambda r: r["median_ms"] and r["median_ms"] * 1e3,
                        lambda r: f"{r['median_ms'] * 1e3:.1f}")
            ax.set_ylabel("us per call")
            ax.set_title(f"{where}: per call at decode sizes, back to back (lower is better)",
                         fontsize=10)
        else:
            top = _bars(ax, prow, pimpls, colors, lambda r: r["gbps"],
                        lambda r: r["x_copy"] and f"{r['x_copy']:.2f}x")
            if copy_gbps:
                ax.axhline(copy_gbps, color="black", linestyle="--", linewidth=1,
                           label=f"copy {copy_gbps:.0f} GB/s")
                top = max(top, copy_gbps)
            ax.set_ylabel("GB/s")
            ax.set_title(f"{where}: back to back", fontsize=10)
        ax.set_ylim(0, top * 1.25)
        ax.legend(fontsize=7, ncol=min(len(pimpls) + 1, 6), loc="upper left")
    fig.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{result['kernel']}.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def print_table(result: dict) -> None:
    """Rich table (plain text when rich is missing): one line per (case, impl)."""
    copy = result.get("copy", {})
    title = (f"{result['kernel']} on {result['device_name']} ({result['device']}), "
             f"{result.get('variant') or '?'}\ncopy bandwidth {_fmt(copy.get('gbps'), '.1f')} "
             f"GB/s; bytes = {result['bytes_formula']}; x copy = GB/s / copy GB/s; per call = "
             "wall clock, calls back to back")
    head = ["case", "impl", "us per call", "GB/s", "x copy", "flushed x copy", "ours faster by",
            "ok"]
    lines = []
    for r in result["rows"]:
        case = f"{r['group']} {r['case']}" if r["group"] else r["case"]
        if r.get("kind") == "latency":
            case += " (decode)"
        if r["impl"] == OURS:
            vs = ", ".join(f"{k} {v:.2f}x" for k, v in r["speedup"].items())
            faster = f"vs {vs}" if vs else "-"
        else:
            faster = _fmt(r["speedup"].get(OURS) and 1 / r["speedup"][OURS], ".2f")
            faster = faster + "x" if faster != "-" else faster
        ok = "yes" if r["ok"] else ("ERROR" if r["error"] else "MISMATCH")
        per_call = r["median_ms"] * 1e3 if r["median_ms"] else None
        lines.append([case, r["impl"], _fmt(per_call, ".2f"), _fmt(r["gbps"], ".1f"),
                      _fmt(r["x_copy"], ".3f"), _fmt(r.get("flushed_x_copy"), ".3f"), faster, ok])
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(title)
        widths = [max(len(str(x)) for x in col) for col in zip(head, *lines)]
        for line in [head, *lines]:
            print("  ".join(str(x).ljust(w) for x, w in zip(line, widths)))
        return
    table = Table(*head)
    prev = None
    for line, r in zip(lines, result["rows"]):
        if prev is not None and line[0] != prev:
            table.add_section()
        prev = line[0]
        style = "bold" if r["impl"] == OURS else None
        table.add_row(*line, style=style)
    console = Console(width=max(Console().width, 120), soft_wrap=False)
    console.print(title, highlight=False, markup=False)
    console.print(table)


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
