"""Build speed: our `kbuild build` vs torch.utils.cpp_extension on the same sources and archs.

For each variant (CPU on this interpreter's torch; CUDA on a torch 2.14.1 cu130 environment):
a cold build, a no-op rebuild, and a rebuild after touching the .cu (or the CPU kernel).
Compiler caches are disabled so cold means cold. Prints a table and writes JSON.

    .venv/bin/python benchmarks/bench_build.py [--cuda] [--repeat 3] [--out docs/bench_build.json]

Each figure is the median of --repeat rounds, ours and cpp_extension interleaved so that
background load hits both alike.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CAPS = "7.5;8.0;8.6;8.7;8.9;9.0;10.0;11.0;12.0;12.1+PTX"  # the builder's CUDA 13 defaults

CPP_EXT = r"""
import os, sys, torch
from torch.utils.cpp_extension import load
project, gen, build, backend = sys.argv[1:5]
srcs = [f"{project}/torch-ext/torch_binding.cpp", f"{project}/csrc/img2gray_cpu.cpp",
        f"{gen}/extension.cpp"]
flags = ["-O3", "-DPy_LIMITED_API=0x03090000", f"-D{backend.upper()}_KERNEL"]
if backend == "cuda":
    srcs.append(f"{project}/csrc/img2gray.cu")
load(name="_img2gray_cppext", sources=srcs, extra_include_paths=[gen, f"{project}/csrc"],
     extra_cflags=flags, extra_cuda_cflags=["-O3"], build_directory=build,
     with_cuda=backend == "cuda", is_python_module=False, verbose=False)
"""


def timed(cmd: list[str], env: dict | None = None) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if proc.returncode:
        sys.exit(f"failed: {' '.join(cmd)}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return time.perf_counter() - start


def copy_project(dst: Path) -> Path:
    dst.mkdir(parents=True)
    for part in ("build.toml", "csrc", "torch-ext"):
        src = REPO / part
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, dst / part)
    return dst


def three_builds(cmd: list[str], env: dict, project: Path, backend: str) -> dict:
    """Cold build, no-op rebuild, and rebuild after touching the kernel source."""
    source = project / "csrc" / ("img2gray.cu" if backend == "cuda" else "img2gray_cpu.cpp")
    cold = timed(cmd, env)
    noop = timed(cmd, env)
    source.touch()
    touched = timed(cmd, env)
    return {"cold_s": cold, "noop_s": noop, "touch_kernel_s": touched}


def bench_kbuild(python: str, backend: str, tmp: Path) -> dict:
    project = copy_project(tmp / "kbuild")
    kbuild = [sys.executable, "-m", "kbuild", "build", str(project), "--backend", backend,
              "--python", python]
    return three_builds(kbuild, {"KBUILD_COMPILER_CACHE": "none"}, project, backend)


def bench_cpp_extension(python: str, backend: str, tmp: Path) -> dict:
    project = copy_project(tmp / "cpp_extension")
    gen = tmp / "gen"
    gen.mkdir()
    templates = REPO / "tools/kbuild/resources/templates"
    shutil.copy(templates / "registration.h", gen)  # the same generated files our build uses
    (gen / "extension.cpp").write_text(
        (templates / "extension.cpp").read_text().replace("@ID@", "_img2gray_cppext"))
    build = tmp / "ce-build"
    build.mkdir()
    script = tmp / "cppext.py"
    script.write_text(CPP_EXT)
    cmd = [python, str(script), str(project), str(gen), str(build), backend]
    env = {"TORCH_CUDA_ARCH_LIST": CAPS, "MAX_JOBS": str(os.cpu_count())}
    if backend == "cuda":  # the same toolkit our build uses
        from kbuild.stages.toolchain import find_cuda
        from kbuild.stages.torch_install import read_torch_install
        env["CUDA_HOME"] = str(find_cuda(read_torch_install(python)).root)
    return three_builds(cmd, env, project, backend)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cuda", action="store_true", help="also the CUDA variant (torch 2.14.1 cu130)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "bench_build.json")
    args = ap.parse_args()
    runs = [("cpu", sys.executable)]
    if args.cuda:
        from kbuild.matrix import envs, matrix
        cuda_python = str(envs.realise(matrix.load(REPO).get("torch214-cu130"),
                                       REPO / ".kbuild" / "envs").python)
        # cpp_extension needs ninja inside the environment it builds for.
        subprocess.run([sys.executable, "-m", "uv", "pip", "install", "-q", "--python",
                        cuda_python, "ninja"], check=True)
        runs.append(("cuda", cuda_python))
    results = {"machine": {"cpus": os.cpu_count()}, "repeat": args.repeat, "variants": {}}
    for backend, python in runs:
        rounds: dict[str, list[dict]] = {"kbuild": [], "cpp_extension": []}
        for _ in range(args.repeat):
            for name, bench in (("kbuild", bench_kbuild), ("cpp_extension", bench_cpp_extension)):
                with tempfile.TemporaryDirectory() as tmp:
                    rounds[name].append(bench(python, backend, Path(tmp)))
        results["variants"][backend] = {
            name: {step: statistics.median(r[step] for r in runs_) for step in runs_[0]}
            | {"rounds": runs_} for name, runs_ in rounds.items()}
    print(f"{'variant':8} {'step':16} {'kbuild s':>9} {'cpp_ext s':>10} {'ratio':>7}")
    for backend, r in results["variants"].items():
        for step in ("cold_s", "noop_s", "touch_kernel_s"):
            a, b = r["kbuild"][step], r["cpp_extension"][step]
            print(f"{backend:8} {step[:-2]:16} {a:9.2f} {b:10.2f} {b / a:6.2f}x")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
