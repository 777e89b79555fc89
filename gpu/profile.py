"""Where the microseconds of one call go, at decode sizes: host side and device side.

    python3 gpu/profile.py --rmsnorm DIR --activation DIR [--out DIR]
    ncu ... python3 gpu/profile.py --rmsnorm DIR --activation DIR --img2gray DIR --ncu

DIR is a kernel repository or variant (what kernels.get_local_kernel takes).

Default mode, for bfloat16 tensors of 1 x 4096 (RMSNorm) and 1 x 4096 outputs (activations):
- `host us`: the host's cost per call, calls submitted while the GPU is still busy with a
  long kernel (so no call waits for the device): perf_counter over 200 calls, median of 15;
- `b2b us`: wall clock per call issued back to back on an idle GPU, device synchronised at
  the end (what a model pays when its ops are this small);
- `gpu us`: the kernel's own time on the device (torch.profiler, CUDA activity), per call.
Rows go from the bare Python call upwards, so differences show what each layer costs: an
empty lambda, torch.empty_like, a torch.ops call of our op through its OpOverload, the
OpOverload's underlying C++ function (`._op`), the kernel's Python function, the layer's
forward, and the PyTorch counterparts. Writes <out>/profile.json and prints the table, then
torch.profiler's per-event host times for one call of each.

--ncu: a short workload for Nsight Compute (each kernel at a decode size and at a bandwidth
size, a few calls each); run it under `ncu --clock-control none`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F


def llama_rms_norm(hidden_states, weight, eps):
    input_dtype = hidden_states.dtype
    hidden_states = hidden_states.to(torch.float32)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + eps)
    return weight * hidden_states.to(input_dtype)


class Norm(torch.nn.Module):
    def __init__(self, weight):
        super().__init__()
        self.weight = torch.nn.Parameter(weight, requires_grad=False)
        self.variance_epsilon = 1e-6


def host_us(fn, calls: int = 200, rounds: int = 15) -> float:
    """Host time per call while the GPU works through a long kernel queued first."""
    out = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        torch.cuda._sleep(int(1e7))  # ~5 ms of GPU work ahead of the calls
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(out)


def b2b_us(fn, calls: int = 400, rounds: int = 15) -> float:
    out = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(out)


def gpu_us(fn, calls: int = 50) -> tuple[float | None, list[str]]:
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type.name == "CUDA"]
    if not kernels:
        return None, []
    total = sum(e.device_time for e in kernels) / calls
    return total, sorted({e.name[:60] for e in kernels})


def host_events(fn, calls: int = 20) -> list[tuple[str, float]]:
    """torch.profiler's host (self CPU) time per event name, per call."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    rows = [(e.key, e.self_cpu_time_total / calls) for e in prof.key_averages()
            if e.key != "cudaDeviceSynchronize"]
    return sorted(rows, key=lambda r: -r[1])[:8]


def probe(rms, act) -> list[dict]:
    dev = "cuda"
    bf16 = torch.bfloat16
    x = torch.randn(1, 4096, device=dev, dtype=bf16)
    w = (1 + 0.1 * torch.randn(4096, device=dev)).to(bf16)
    xg = torch.randn(1, 8192, device=dev, dtype=bf16)
    out = torch.empty_like(x)
    norm = Norm(w)
    layer_rms = rms.layers.LlamaRMSNorm.forward
    gelu_layer = act.layers.GeluTanh()
    silu_layer = act.layers.SiluAndMul()
    rms_op = rms.ops.rms_norm.default
    gelu_op = act.ops.gelu_tanh.default
    cases = [
        ("python: empty lambda", lambda: None),
        ("torch.empty_like(x)", lambda: torch.empty_like(x)),
        ("F.gelu(x, tanh)  [PyTorch]", lambda: F.gelu(x, approximate="tanh")),
        ("ops.gelu_tanh.default(out, x)", lambda: gelu_op(out, x)),
        ("ops.gelu_tanh.default._op(out, x)", lambda: gelu_op._op(out, x)),
        ("kernel.gelu_tanh(out, x)", lambda: act.gelu_tanh(out, x)),
        ("ops.gelu_tanh_functional(x)", lambda: act.ops.gelu_tanh_functional.default(x)),
        ("layers.GeluTanh forward", lambda: gelu_layer.forward(x)),
        ("F.silu(x[:, :d]) * x[:, d:]  [PyTorch]", lambda: F.silu(xg[..., :4096]) * xg[..., 4096:]),
        ("layers.SiluAndMul forward", lambda: silu_layer.forward(xg)),
        ("F.rms_norm  [PyTorch]", lambda: F.rms_norm(x, (4096,), w, 1e-6)),
        ("LlamaRMSNorm eager (7 ops)  [transformers]", lambda: llama_rms_norm(x, w, 1e-6)),
        ("ops.rms_norm.default(x, w, eps)", lambda: rms_op(x, w, 1e-6)),
        ("ops.rms_norm.default._op(x, w, eps)", lambda: rms_op._op(x, w, 1e-6)),
        ("kernel.rms_norm(x, w, eps)", lambda: rms.rms_norm(x, w, 1e-6)),
        ("layers.LlamaRMSNorm forward", lambda: layer_rms(norm, x)),
    ]
    rows = []
    for name, fn in cases:
        for _ in range(50):
            fn()
        row = {"call": name, "host_us": host_us(fn), "b2b_us": b2b_us(fn)}
        row["gpu_us"], row["kernels"] = gpu_us(fn)
        row["host_events"] = host_events(fn)
        rows.append(row)
        gpu = "-" if row["gpu_us"] is None else f"{row['gpu_us']:.2f}"
        print(f"  {name:<44} host {row['host_us']:6.2f} us  b2b {row['b2b_us']:6.2f} us  "
              f"gpu {gpu:>6} us", flush=True)
    return rows


def ncu_workload(rms, act, img) -> None:
    """Each kernel at a decode size and at a bandwidth size, three calls each."""
    bf16 = torch.bfloat16
    for rows, hidden in ((1, 4096), (65536, 4096)):
        x = torch.randn(rows, hidden, device="cuda", dtype=bf16)
        w = torch.ones(hidden, device="cuda", dtype=bf16)
        for _ in range(3):
            rms.rms_norm(x, w, 1e-6)
            F.rms_norm(x, (hidden,), w, 1e-6)
    for rows, d in ((1, 8192), (32768, 4096)):
        x = torch.randn(rows, 2 * d, device="cuda", dtype=bf16)
        for _ in range(3):
            act.ops.silu_and_mul_functional(x)
            act.ops.gelu_tanh_functional(x)
    if img is not None:
        rgb = torch.randint(0, 256, (4096, 4096, 3), dtype=torch.uint8, device="cuda")
        for _ in range(3):
            img.img2gray(rgb)
    torch.cuda.synchronize()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rmsnorm", type=Path, required=True)
    p.add_argument("--activation", type=Path, required=True)
    p.add_argument("--img2gray", type=Path)
    p.add_argument("--out", type=Path, default=Path("."))
    p.add_argument("--ncu", action="store_true", help="only the Nsight Compute workload")
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("no CUDA device")
    from kernels import get_local_kernel

    rms = get_local_kernel(args.rmsnorm.resolve(), backend="cuda")
    act = get_local_kernel(args.activation.resolve(), backend="cuda")
    if args.ncu:
        img = get_local_kernel(args.img2gray.resolve(), backend="cuda") if args.img2gray else None
        ncu_workload(rms, act, img)
        return 0
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; bfloat16, 1 x 4096")
    rows = probe(rms, act)
    print("\ntorch.profiler, host self time per call (us), top events:")
    for r in rows:
        events = ", ".join(f"{k} {v:.2f}" for k, v in r["host_events"][:6])
        print(f"  {r['call']:<44} {events}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "profile.json").write_text(json.dumps(
        {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
         "shape": "1x4096 bfloat16 (SiluAndMul: 1x8192 in)", "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
