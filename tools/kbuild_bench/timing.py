"""How calls are timed.

- Back to back (`time_back_to_back`, the main figure): calls issued one after another, as a model
  issues its ops, timed by the wall clock: a batch of calls between two device synchronisations,
  long enough (>= B2B_TARGET_MS) that the synchronisation is negligible; the per-call figure is
  the batch time over its calls, the median over B2B_ROUNDS batches, implementations interleaved
  round by round. Host work (Python, dispatch, launch) counts whenever it is longer than the
  device's, exactly as in a model. `input_cycle` rotates inputs through copies that together
  exceed the L2 several times, so each call reads its input from device memory.
- One call with the L2 flushed (`time_interleaved`): CUDA events around one call, a 512 MiB buffer
  read before it (evicts the inputs from the L2 and leaves only clean lines there); that figure
  hides host cost, because the flush keeps the GPU busy while the host submits the call.
- `copy_bandwidth`: the ceiling, a device-to-device copy (1 GiB on CUDA), its bytes counted as
  read + written.

On the CPU: perf_counter, and no synchronisation.
"""

from __future__ import annotations

import itertools
import statistics
import time
from typing import Any, Callable

import torch

from .stats import Timing, gbps, summarize

FLUSH_BYTES = 512 << 20
COPY_BYTES_CUDA = 1 << 30
COPY_BYTES_CPU = 128 << 20

_flush_buffers: dict[str, torch.Tensor] = {}


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



def time_fn(fn: Callable[[], Any], device: str | torch.device, *, reps: int = 50,
            warmup: int = 10, flush: bool = True) -> Timing:
    """Median time of `fn()` in ms: CUDA events on a CUDA device, perf_counter elsewhere."""
    device = torch.device(device)
    for _ in range(max(1, warmup)):
        fn()
    return summarize(_samples(fn, device, reps, flush))


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
    return [summarize(t) for t in samples]


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
    return [summarize(t, n) for t, n in zip(samples, calls)]


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
