"""Kernel speed with and without nvcc's split compile (`--split-compile`): the same calls timed on
two builds of the same kernel, one compiled with the split and one without, on this GPU.

NVIDIA warns that split compilation may cost runtime performance; kbuild splits local builds
(`--cuda-capabilities`) and, for release builds, only where this measurement shows at most 3 %
(`SPLIT_RELEASE_BUILDS` in tools/kbuild/stages/compile/__init__.py). Build each project twice, e.g.

    KBUILD_NVCC_SPLIT=1  kbuild build P --cuda-capabilities native --build-dir /tmp/nosplit/P
    KBUILD_NVCC_SPLIT=16 kbuild build P --cuda-capabilities native --build-dir /tmp/split/P

then

    python benchmarks/bench_split_runtime.py \\
        --pair punica-sgmv /tmp/nosplit/punica-sgmv /tmp/split/punica-sgmv \\
        --pair img2gray /tmp/nosplit/img2gray /tmp/split/img2gray ... \\
        [--benchmarks NAME DIR] [--reps 200] [--rounds 7] [--out docs/gpu/split_runtime.json]

Each build is loaded with `kernels.get_local_kernel` in a worker process of its own (two builds
of one kernel cannot share a process: they register the same op namespace). The cases are the
`Benchmark` classes of the project's `benchmarks/*.py` (the `kernels benchmark` format: every
`benchmark_<name>` after its `setup_<name>` or `setup`, checked against `verify_<name>` when it
has one), and for punica-sgmv also its `dispatch_bgmv` op (LoRA shrink and expand, several batch
sizes, float16 and bfloat16, checked against torch). Per case and round: warm-up calls, then
--reps calls back to back, each timed with CUDA events, their median; the two builds alternate
case by case and round by round (ABBA); a case's figure is the median of its rounds. Prints
the split/unsplit ratio of every case, each project's geometric mean and the largest, and writes
JSON (the GPU, torch, the builds' metadata inside).
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
THRESHOLD = 1.03  # the largest cost at which release builds may split (docs/build-speed.md)
OWN_BENCHMARKS = {"img2gray": REPO / "benchmarks" / "benchmark_img2gray.py",
                  "activation": REPO / "examples" / "activation" / "benchmarks",
                  "rmsnorm": REPO / "examples" / "rmsnorm" / "benchmarks"}


# --- the worker: one build loaded, cases timed on request ------------------------------------

def benchmark_files(where: Path) -> list[Path]:
    return [where] if where.is_file() else sorted(where.glob("benchmark*.py"))


def load_cases(kernel, files: list[Path], device: str) -> dict:
    """name -> (bench object, setup, call, verify or None), from the files' Benchmark classes."""
    from kernels.benchmark import Benchmark
    cases = {}
    for path in files:
        spec = importlib.util.spec_from_file_location(f"_bench_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for cls in vars(module).values():
            if not (inspect.isclass(cls) and issubclass(cls, Benchmark) and cls is not Benchmark):
                continue
            for attr in dir(cls):
                if not attr.startswith("benchmark_"):
                    continue
                name = attr.removeprefix("benchmark_")
                bench = cls()
                bench.kernel, bench.device = kernel, device
                setup = getattr(bench, f"setup_{name}", None) or bench.setup
                cases[f"{cls.__name__}.{name}"] = (bench, setup, getattr(bench, attr),
                                                   getattr(bench, f"verify_{name}", None))
    return cases


def bgmv_cases(kernel) -> dict:
    """punica-sgmv's dispatch_bgmv: y[b] += scale * W[idx[b]][layer] @ x[b], for LoRA shrink
    (hidden -> rank) and expand (rank -> hidden)."""
    import torch
    if not hasattr(kernel, "add_lora_a_bgmv"):
        return {}
    cases = {}
    for dtype in (torch.float16, torch.bfloat16):
        for hidden, rank in ((4096, 16), (4096, 64)):
            for batch in (1, 16, 64, 256):
                for kind, (f_in, f_out) in (("shrink", (hidden, rank)), ("expand", (rank, hidden))):
                    case = _Bgmv(kernel, dtype, batch, f_in, f_out)
                    name = f"bgmv.{kind}.{str(dtype).split('.')[-1]}.h{hidden}.r{rank}.b{batch}"
                    cases[name] = (case, case.setup, case.run, case.verify)
    return cases


class _Bgmv:
    loras, layers, layer = 4, 2, 1

    def __init__(self, kernel, dtype, batch, f_in, f_out):
        self.kernel, self.dtype, self.batch, self.f_in, self.f_out = kernel, dtype, batch, f_in, f_out

    def setup(self):
        import torch
        g = torch.Generator(device="cuda").manual_seed(0)
        self.w = [torch.randn(self.layers, self.f_out, self.f_in, device="cuda", dtype=self.dtype,
                              generator=g) * 0.05 for _ in range(self.loras)]
        self.w_ptr = torch.tensor([w.data_ptr() for w in self.w], dtype=torch.int64, device="cuda")
        self.x = torch.randn(self.batch, self.f_in, device="cuda", dtype=self.dtype, generator=g)
        self.idx = torch.randint(0, self.loras, (self.batch,), device="cuda", dtype=torch.int64,
                                 generator=g)
        self.out = torch.zeros(self.batch, self.f_out, device="cuda", dtype=self.dtype)

    def run(self):
        self.kernel.add_lora_a_bgmv(self.out, self.x, self.w_ptr, self.idx, self.layer)

    def verify(self):
        import torch
        self.out.zero_()
        self.run()
        w = torch.stack([self.w[int(i)][self.layer] for i in self.idx.tolist()]).float()
        return torch.einsum("boi,bi->bo", w, self.x.float()).to(self.dtype)


def check(bench, call, verify) -> str:
    import torch
    if verify is None:
        return "not checked (no verify_)"
    if not isinstance(bench, _Bgmv):  # the `kernels benchmark` order: the call, then the reference
        call()
    expected = verify()
    got = bench.out
    tol = 5e-2 if expected.dtype in (torch.float16, torch.bfloat16) else 1e-3
    if not torch.allclose(got.float(), expected.float(), rtol=tol, atol=tol):
        return f"WRONG: max difference {(got.float() - expected.float()).abs().max().item():.3g}"
    return "ok"


def time_case(call, reps: int, warmup: int, device: str) -> float:
    import torch
    for _ in range(warmup):
        call()
    if device != "cuda":  # the plumbing, tried on a machine without a GPU
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            call()
            times.append((time.perf_counter() - start) * 1000)
        return statistics.median(times)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    torch.cuda.synchronize()
    for s, e in zip(starts, ends):
        s.record()
        call()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def worker(device: str, build: str, files: list[str]) -> None:
    import torch
    from kernels import get_local_kernel
    answer, sys.stdout = sys.stdout, sys.stderr  # only our answers on stdout
    kernel = get_local_kernel(Path(build), backend=device)
    cases = load_cases(kernel, [Path(f) for f in files], device)
    cases |= bgmv_cases(kernel) if device == "cuda" else {}
    checks = {}
    for name, (bench, setup, call, verify) in cases.items():
        if getattr(bench, "seed", None) is not None:
            torch.manual_seed(bench.seed)
        setup()
        checks[name] = check(bench, call, verify)
    gpu = torch.cuda.get_device_name() if device == "cuda" else "none (CPU)"
    answer.write(json.dumps({"cases": list(cases), "checks": checks, "gpu": gpu, "torch": torch.__version__,
                             "file": getattr(kernel, "__file__", "")}) + "\n")
    answer.flush()
    for line in sys.stdin:
        request = json.loads(line)
        _, _, call, _ = cases[request["case"]]
        answer.write(json.dumps({"ms": time_case(call, request["reps"], request["warmup"], device)}) + "\n")
        answer.flush()


# --- the driver --------------------------------------------------------------------------------

class Worker:
    def __init__(self, python: str, device: str, build: Path, files: list[Path]):
        self.proc = subprocess.Popen([python, __file__, "--worker", device, str(build), *map(str, files)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line:
            sys.exit(f"the worker for {build} ended before it was ready (its error is above)")
        self.info = json.loads(line)

    def time(self, case: str, reps: int, warmup: int) -> float:
        self.proc.stdin.write(json.dumps({"case": case, "reps": reps, "warmup": warmup}) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())["ms"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def project_of(build: Path) -> Path | None:
    for folder in (build, *build.parents):
        if (folder / "build.toml").is_file():
            return folder
    return None


def metadata(build: Path) -> dict:
    found = sorted(build.rglob("metadata.json")) if build.is_dir() else []
    return json.loads(found[0].read_text()).get("backend", {}) if found else {}


def geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")


def compare(name: str, base: Path, split: Path, files: list[Path], args) -> dict:
    a, b = (Worker(args.python, args.device, base, files), Worker(args.python, args.device, split, files))
    try:
        cases = [c for c in a.info["cases"] if c in b.info["cases"]]
        runs: dict[str, dict[str, list[float]]] = {c: {"base": [], "split": []} for c in cases}
        for r in range(args.rounds):
            for i, case in enumerate(cases):
                order = (("base", a), ("split", b)) if (r + i) % 2 == 0 else (("split", b), ("base", a))
                for label, w in order:
                    runs[case][label].append(w.time(case, args.reps, args.warmup))
        out = {"base": str(base), "split": str(split), "base_backend": metadata(base),
               "split_backend": metadata(split), "gpu": a.info["gpu"], "torch": a.info["torch"],
               "checks": {"base": a.info["checks"], "split": b.info["checks"]}, "cases": {}}
        for case, r in runs.items():
            base_ms, split_ms = statistics.median(r["base"]), statistics.median(r["split"])
            out["cases"][case] = {"base_ms": base_ms, "split_ms": split_ms,
                                  "ratio": split_ms / base_ms, "runs": r}
        ratios = [c["ratio"] for c in out["cases"].values()]
        out["geomean_ratio"], out["max_ratio"] = geomean(ratios), max(ratios, default=float("nan"))
        return out
    finally:
        a.close()
        b.close()


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3], sys.argv[4:])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", nargs=3, action="append", required=True, metavar=("NAME", "BASE", "SPLIT"),
                    help="a kernel's build without and with the split (variant, build folder or project)")
    ap.add_argument("--benchmarks", nargs=2, action="append", default=[], metavar=("NAME", "PATH"),
                    help="the benchmarks/ folder or file of NAME (default: ours for img2gray, "
                    "activation, rmsnorm; else the benchmarks/ of the project holding BASE)")
    ap.add_argument("--python", default=sys.executable, help="interpreter with torch and kernels")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="cpu: try the plumbing on a machine without a GPU (CPU variants)")
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "gpu" / "split_runtime.json")
    args = ap.parse_args()
    where = {n: Path(p) for n, p in args.benchmarks}
    results = {"what": "kernel time with nvcc --split-compile / without (median of rounds of "
               "per-call CUDA-event medians)", "reps": args.reps, "rounds": args.rounds,
               "threshold": THRESHOLD, "started": time.strftime("%Y-%m-%d %H:%M:%S"), "projects": {}}
    for name, base, split in args.pair:
        base, split = Path(base).resolve(), Path(split).resolve()
        bench = where.get(name) or OWN_BENCHMARKS.get(name) or (
            (project_of(base) or base) / "benchmarks")
        files = benchmark_files(bench) if bench.exists() else []
        print(f"{name}: {len(files)} benchmark files; timing ...", flush=True)
        results["projects"][name] = compare(name, base, split, files, args)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\n{'case':58} {'no split':>10} {'split':>10} {'ratio':>7}")
    worst = 0.0
    for name, p in results["projects"].items():
        for case, c in p["cases"].items():
            print(f"{name + ' ' + case:58} {c['base_ms'] * 1000:8.1f}us {c['split_ms'] * 1000:8.1f}us "
                  f"{c['ratio']:6.3f}x")
        bad = {k: v for side in ("base", "split") for k, v in p["checks"][side].items()
               if not v.startswith(("ok", "not checked"))}
        print(f"{name}: geometric mean {p['geomean_ratio']:.3f}x, largest {p['max_ratio']:.3f}x"
              + (f"; CHECKS FAILED: {bad}" if bad else ""))
        worst = max(worst, p["geomean_ratio"])
    verdict = "at most" if worst <= THRESHOLD else "more than"
    results["verdict"] = (f"split compile costs {verdict} {(THRESHOLD - 1) * 100:.0f} % (largest "
                          f"project geometric mean {worst:.3f}x)")
    print(results["verdict"])
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
