"""Time every variant of a kernel's design-space sweep (gpu/tune/*_variants.cu) on this GPU.

    python gpu/tune/tune.py [img2gray] [activation] [floor] [--out DIR] [--reps N] [--back-to-back]

Each sweep file is compiled with nvcc for this GPU's architecture into a small shared library
(extern "C": variant_count, variant_name, variant_launch) and every variant is checked
against a PyTorch reference and timed with the benchmark harness (kbuild_bench.harness: CUDA
events, median, L2 flushed before each call), beside the 1 GiB copy and PyTorch eager in the
same run. Prints the best variants per case and writes tune-<kernel>.json.

--back-to-back: img2gray only, timed as the benchmarks' main figure (calls issued back to back,
wall clock per call, inputs rotating through copies larger than the L2), at 1080x1920, 4096^2,
4095x4097 and 8192^2; writes tune-img2gray-b2b.json.

`floor` measures what the timing method itself costs at img2gray's 4096x4096 size (67 MB
moved): an empty kernel, a copy of the same byte count, and one img2gray variant timed three
ways (L2 flushed before each call, as the benchmarks do; not flushed; 20 calls back to back
between two events, not flushed).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "tools"))
from kbuild_bench import harness as benchlib  # noqa: E402


def build(name: str, work: Path) -> ctypes.CDLL:
    src = HERE / f"{name}_variants.cu"
    lib = work / f"{name}_variants.so"
    major, minor = torch.cuda.get_device_capability()
    if not lib.exists() or lib.stat().st_mtime < src.stat().st_mtime:
        work.mkdir(parents=True, exist_ok=True)
        subprocess.run(["nvcc", "-O3", f"-arch=sm_{major}{minor}", "-shared", "-Xcompiler",
                        "-fPIC", "-o", str(lib), str(src)], check=True)
    dll = ctypes.CDLL(str(lib))
    dll.variant_name.restype = ctypes.c_char_p
    dll.variant_launch.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                   ctypes.c_int64, ctypes.c_void_p]
    return dll


def names(dll) -> list[str]:
    return [dll.variant_name(i).decode() for i in range(dll.variant_count())]


def sweep(cases, dll, reps: int, copy_gbps: float, b2b: bool = False) -> list[dict]:
    rows = []
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    variants = names(dll)

    def time(fn):
        if b2b:
            return benchlib.time_back_to_back([fn], "cuda", warmup=3)[0]
        return benchlib.time_fn(fn, "cuda", reps=reps, warmup=3)

    for case, nbytes, make, baselines, run_variant, check in cases:
        args = make()
        for bname, bfn in baselines(args).items():
            t = time(bfn)
            rows.append({"case": case, "impl": bname, "median_ms": t.median_ms,
                         "gbps": benchlib.gbps(nbytes, t.median_ms),
                         "x_copy": benchlib.gbps(nbytes, t.median_ms) / copy_gbps, "ok": True})
        for i, vname in enumerate(variants):
            fn = lambda i=i: run_variant(dll, i, args, stream)  # noqa: E731
            fn()
            torch.cuda.synchronize()
            ok, err = check(args)
            t = time(fn)
            g = benchlib.gbps(nbytes, t.median_ms)
            rows.append({"case": case, "impl": vname, "median_ms": t.median_ms, "gbps": g,
                         "x_copy": g / copy_gbps, "ok": ok, "err": err})
        args = None  # frees the case's tensors before the next one is made
        torch.cuda.empty_cache()
    return rows


def img2gray_cases(shapes=((1080, 1920), (4096, 4096), (4095, 4097), (8192, 8192),
                            (8191, 8191), (16384, 16384)), rotate: bool = False):
    def make_for(h, w):
        def make():
            rgb = torch.randint(0, 256, (h, w, 3), dtype=torch.uint8, device="cuda")
            f = rgb.float()
            ref = (f[..., 0] * 0.21 + f[..., 1] * 0.72 + f[..., 2] * 0.07).to(torch.uint8)
            next_rgb = benchlib.input_cycle(rgb) if rotate else (lambda: rgb)
            return {"rgb": rgb, "next": next_rgb, "ref": ref,
                    "out": torch.empty((h, w), dtype=torch.uint8, device="cuda")}
        return make

    def baselines(a):
        nxt = a["next"]

        def eager():
            f = nxt().float()
            return (f[..., 0] * 0.21 + f[..., 1] * 0.72 + f[..., 2] * 0.07).to(torch.uint8)
        src = nxt()
        half = torch.empty(src.numel() // 3 * 2, dtype=torch.uint8, device="cuda")
        other = torch.empty_like(half)
        return {"torch-eager": eager, "copy_ of the same bytes": lambda: other.copy_(half)}

    def run(dll, i, a, stream):
        rc = dll.variant_launch(i, a["next"]().data_ptr(), a["out"].data_ptr(), a["out"].numel(),
                                stream)
        assert rc == 0, rc

    def check(a):
        bad = int((a["out"] != a["ref"]).sum())
        a["out"].fill_(0)
        return bad == 0, bad

    for h, w in shapes:
        yield f"{h}x{w}", 4 * h * w, make_for(h, w), baselines, run, check


def activation_cases():
    def make_for(n):
        def make():
            x = torch.randn(n, dtype=torch.float16, device="cuda") * 3
            return {"x": x, "out": torch.empty_like(x),
                    "ref": {"gelu": F.gelu(x.float()).half(),
                            "gelu_tanh": F.gelu(x.float(), approximate="tanh").half()}}
        return make

    def baselines(a):
        x = a["x"]
        return {"eager-gelu": lambda: F.gelu(x),
                "eager-gelu_tanh": lambda: F.gelu(x, approximate="tanh")}

    def run(dll, i, a, stream):
        a["op"] = dll.variant_name(i).decode().split("/")[0]
        rc = dll.variant_launch(i, a["out"].data_ptr(), a["x"].data_ptr(), a["x"].numel(), stream)
        assert rc == 0, rc

    def check(a):
        ref = a["ref"][a["op"]]
        diff = (a["out"].float() - ref.float()).abs()
        tol = 1e-3 + 1e-3 * ref.float().abs()  # about 1 ulp of fp16
        bad = int((diff > tol).sum())
        err = float(diff.max())
        a["out"].fill_(0)
        return bad == 0, err

    for e in (20, 24, 28):
        yield f"2^{e}", 4 * (1 << e), make_for(1 << e), baselines, run, check


def floor(reps: int, copy_gbps: float, work: Path) -> list[dict]:
    dll = build("img2gray", work)
    dll.empty_launch.argtypes = [ctypes.c_void_p]
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    h = w = 4096
    nbytes = 4 * h * w
    rgb = torch.randint(0, 256, (h, w, 3), dtype=torch.uint8, device="cuda")
    out = torch.empty((h, w), dtype=torch.uint8, device="cuda")
    src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    pick = {"ldg/stcs/u1/direct/onestep", "ldcs/stcs/u2/smem/onestep"}
    variants = [(i, n) for i, n in enumerate(names(dll)) if n in pick]
    rows = []

    def row(what, ms, moved=nbytes):
        g = benchlib.gbps(moved, ms) if moved else float("nan")
        rows.append({"what": what, "median_ms": ms, "gbps": g, "x_copy": g / copy_gbps})
        print(f"  {what:<58} {ms * 1e3:8.2f} us {g:7.0f} GB/s {g / copy_gbps:.3f}x copy")

    print(f"\nfloor at 4096x4096 ({nbytes / 1e6:.1f} MB moved)")
    t = benchlib.time_fn(lambda: dll.empty_launch(stream), "cuda", reps=reps)
    row("empty kernel, L2 flushed", t.median_ms, 0)
    t = benchlib.time_fn(lambda: dst.copy_(src), "cuda", reps=reps)
    row("copy_ of the same byte count, L2 flushed", t.median_ms)
    t = benchlib.time_fn(lambda: dst.copy_(src), "cuda", reps=reps, flush=False)
    row("copy_ of the same byte count, not flushed", t.median_ms)
    for i, n in variants:
        fn = lambda i=i: dll.variant_launch(i, rgb.data_ptr(), out.data_ptr(), h * w, stream)  # noqa: E731
        row(f"{n}, L2 flushed", benchlib.time_fn(fn, "cuda", reps=reps).median_ms)
        row(f"{n}, not flushed", benchlib.time_fn(fn, "cuda", reps=reps, flush=False).median_ms)
        batch = 20

        def many(fn=fn):
            for _ in range(batch):
                fn()
        ms = benchlib.time_fn(many, "cuda", reps=reps, flush=False).median_ms / batch
        row(f"{n}, {batch} back to back", ms)
    return rows


def report(kernel: str, rows: list[dict], top: int) -> None:
    cases = list(dict.fromkeys(r["case"] for r in rows))
    for case in cases:
        rs = [r for r in rows if r["case"] == case]
        base = [r for r in rs if not r["impl"].count("/")]
        print(f"\n{kernel} {case}: " + ", ".join(f"{b['impl']} {b['gbps']:.0f} GB/s "
                                                 f"({b['x_copy']:.3f})" for b in base))
        vs = sorted((r for r in rs if r["impl"].count("/")), key=lambda r: r["median_ms"])
        bad = [r["impl"] for r in vs if not r["ok"]]
        for r in vs[:top]:
            print(f"  {r['impl']:<40} {r['median_ms'] * 1e3:9.2f} us {r['gbps']:7.0f} GB/s "
                  f"{r['x_copy']:.3f}x copy  err {r['err']}")
        if bad:
            print(f"  WRONG RESULTS: {bad}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("kernels", nargs="*", default=["img2gray", "activation", "floor"])
    p.add_argument("--out", type=Path, default=Path("."))
    p.add_argument("--work", type=Path, default=Path("/tmp/kbuild-tune"))
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--top", type=int, default=12)
    p.add_argument("--back-to-back", action="store_true", help="img2gray, timed back to back")
    a = p.parse_args()
    copy = benchlib.copy_bandwidth("cuda")
    print(f"copy {copy['gbps']:.0f} GB/s on {torch.cuda.get_device_name()}")
    a.out.mkdir(parents=True, exist_ok=True)
    if a.back_to_back:
        cases = img2gray_cases(((1080, 1920), (4096, 4096), (4095, 4097), (8192, 8192)),
                               rotate=True)
        rows = sweep(cases, build("img2gray", a.work), a.reps, copy["gbps"], b2b=True)
        report("img2gray (back to back)", rows, a.top)
        (a.out / "tune-img2gray-b2b.json").write_text(json.dumps(
            {"device": torch.cuda.get_device_name(), "copy": copy, "timer": "back to back",
             "rows": rows}, indent=1))
        return 0
    for kernel in a.kernels:
        if kernel == "floor":
            rows = floor(a.reps, copy["gbps"], a.work)
            (a.out / "tune-floor.json").write_text(json.dumps(
                {"device": torch.cuda.get_device_name(), "copy": copy, "rows": rows}, indent=1))
            continue
        dll = build(kernel, a.work)
        cases = {"img2gray": img2gray_cases, "activation": activation_cases}[kernel]()
        rows = sweep(cases, dll, a.reps, copy["gbps"])
        report(kernel, rows, a.top)
        (a.out / f"tune-{kernel}.json").write_text(json.dumps(
            {"device": torch.cuda.get_device_name(), "copy": copy, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
