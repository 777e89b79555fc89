"""The environment matrix from PyPI: environment creation, per-variant compile time, build-all wall
time with --jobs 1 and 2, a no-change re-run, a Python-only change, and .so sizes; realising an
environment from its lock (cold and warm uv cache, reuse) and locking one.

Everything lives under .kbuild/bench/ (a project copy, its own envs folder, its own uv cache so
environment creation starts cold, and a private sccache server and cache directory):

    .venv/bin/python benchmarks/bench_matrix.py --phase envs     # create the environments (downloads)
    .venv/bin/python benchmarks/bench_matrix.py --phase builds   # the build-all runs
    .venv/bin/python benchmarks/bench_matrix.py --phase locks    # realising from the locks
    .venv/bin/python benchmarks/bench_matrix.py                  # both

Results are merged into docs/bench_matrix.json. `--builder DIR` runs another copy of the kbuild
package (PYTHONPATH=DIR), to compare builder changes on the same environments.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / ".kbuild" / "bench"
ENVS = ["torch213-cpu", "torch212-cu130", "torch213-cu130", "torch214-cu130"]
OUT = REPO / "docs" / "bench_matrix.json"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kbuild(args: list[str], env: dict, builder: Path | None = None) -> tuple[float, dict | None, str]:
    """Runs kbuild; returns (wall seconds, the --json summary if any, output)."""
    run_env = {**os.environ, **env}
    if builder:
        run_env["PYTHONPATH"] = str(builder)
    summary = BENCH / "last.json"
    summary.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "kbuild", *args]
    if args[0] == "build-all":
        cmd += ["--json", str(summary)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=run_env)
    wall = time.perf_counter() - start
    if proc.returncode:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return wall, json.loads(summary.read_text()) if summary.is_file() else None, proc.stdout


def sccache_stats(sccache: str, env: dict) -> dict:
    out = subprocess.run([sccache, "--show-stats", "--stats-format=json"], capture_output=True,
                         text=True, env={**os.environ, **env}).stdout
    stats = json.loads(out)["stats"]
    return {"hits": stats["cache_hits"]["adv_counts"], "misses": stats["cache_misses"]["adv_counts"],
            "compile_requests": stats["compile_requests"]}


def ninja_lines(project: Path, variant: str) -> int:
    log = project / ".kbuild" / variant / "cmake-build" / ".ninja_log"
    return len(log.read_text().splitlines()) if log.is_file() else 1


def ninja_seconds(project: Path, variant: str, skip: int) -> dict:
    """Seconds per kind of step (nvcc / c++ / link) that ninja ran after line `skip` of its log."""
    log = project / ".kbuild" / variant / "cmake-build" / ".ninja_log"
    kinds = {"nvcc": 0.0, "c++": 0.0, "link": 0.0}
    lines = log.read_text().splitlines()[max(1, skip):] if log.is_file() else []
    for line in lines:
        start, end, _, output, _ = line.split("\t")
        kind = "nvcc" if output.endswith(".cu.o") else "link" if output.endswith(".so") else "c++"
        kinds[kind] += (int(end) - int(start)) / 1000
    return {k: round(v, 2) for k, v in kinds.items()}


def reset_builds(project: Path) -> None:
    shutil.rmtree(project / "build", ignore_errors=True)
    for p in (project / ".kbuild").glob("torch*"):
        shutil.rmtree(p, ignore_errors=True)
    shutil.rmtree(project / ".kbuild" / "buildall", ignore_errors=True)


def phase_envs(envs: list[str], results: dict) -> None:
    project = BENCH / "proj"
    env = {"KBUILD_ENVS_DIR": str(BENCH / "envs"), "UV_CACHE_DIR": str(BENCH / "uv-cache")}
    created = {}
    for name in envs:
        wall, _, _ = kbuild(["envs", str(project), "--create", name], env)
        stamp = json.loads((BENCH / "envs" / name / "kbuild-env.json").read_text())
        created[name] = {"wall_s": round(wall, 1), "venv_s": stamp["seconds"],
                         "torch": stamp.get("torch"), "installer": stamp["installer"]}
        print(f"env {name}: {wall:.1f}s", flush=True)
    tk = BENCH / "envs" / "toolkit-cu130" / "kbuild-env.json"
    results["envs"] = {"created": created, "toolkit_cu130_s": json.loads(tk.read_text())["seconds"]
                       if tk.is_file() else None, "cold_uv_cache": True,
                       "disk_gb": round(sum(f.stat().st_size for f in (BENCH / "envs").rglob("*")
                                            if f.is_file() and not f.is_symlink()) / 1e9, 1)}


def phase_locks(results: dict, names: tuple[str, ...] = ("torch213-cpu", "torch214-cu130")) -> None:
    """Each environment realised from its lock: with an empty uv cache (files from the indexes
    pip is configured with), again in a fresh folder (uv cache warm), and reused (nothing to do);
    and the time `kbuild lock --upgrade` takes to re-resolve it."""
    project = BENCH / "proj"
    cold_cache = BENCH / "uv-cache-locks"
    out = {}
    for name in names:
        shutil.rmtree(cold_cache, ignore_errors=True)
        row = {}
        for tag, folder in (("cold", "envs-lock-a"), ("warm", "envs-lock-b"), ("reuse", "envs-lock-b")):
            if tag != "reuse":
                shutil.rmtree(BENCH / folder, ignore_errors=True)
            env = {"KBUILD_ENVS_DIR": str(BENCH / folder), "UV_CACHE_DIR": str(cold_cache)}
            wall, _, _ = kbuild(["envs", str(project), "--create", name], env)
            stamp = json.loads((BENCH / folder / name / "kbuild-env.json").read_text())
            assert stamp.get("lock"), f"{name} was not realised from its lock"
            row[tag] = {"wall_s": round(wall, 1)}
            print(f"lock {name} {tag}: {wall:.1f}s", flush=True)
        wall, _, _ = kbuild(["lock", name, "--project", str(project), "--upgrade"],
                            {"KBUILD_ENVS_DIR": str(BENCH / "envs-lock-b")})
        row["lock_upgrade_s"] = round(wall, 1)
        out[name] = row
    shutil.rmtree(cold_cache, ignore_errors=True)
    for folder in ("envs-lock-a", "envs-lock-b"):
        shutil.rmtree(BENCH / folder, ignore_errors=True)
    results["locks"] = out


def phase_builds(envs: list[str], results: dict, builder: Path | None, label: str) -> None:
    project = BENCH / "proj"
    sccache = shutil.which("sccache") or str(Path(sys.executable).parent / "sccache")
    base = {"KBUILD_ENVS_DIR": str(BENCH / "envs"), "UV_CACHE_DIR": str(BENCH / "uv-cache"),
            "SCCACHE_SERVER_PORT": str(free_port()), "KBUILD_COMPILER_CACHE": sccache}
    runs = {}
    sys.path.insert(0, str(REPO / "tools"))
    from kbuild.matrix import matrix
    mx = matrix.load(project)

    def fresh_cache(tag: str) -> dict:
        subprocess.run([sccache, "--stop-server"], capture_output=True, env={**os.environ, **base})
        cache = BENCH / f"sccache-{label}-{tag}"
        shutil.rmtree(cache, ignore_errors=True)
        env = {**base, "SCCACHE_DIR": str(cache)}
        subprocess.run([sccache, "--start-server"], capture_output=True, env={**os.environ, **env})
        return env

    def build_all(tag: str, env: dict, jobs: int, extra: list[str] = (),
                  names: list[str] | None = None) -> None:
        subprocess.run([sccache, "--zero-stats"], capture_output=True, env={**os.environ, **env})
        variants = {name: mx.get(name).variant() for name in names or envs}
        before = {v: ninja_lines(project, v) for v in variants.values()}
        wall, summary, _ = kbuild(["build-all", str(project), "--only", ",".join(names or envs),
                                   "--jobs", str(jobs), *extra], env, builder)
        runs[tag] = {"jobs": jobs, "wall_s": round(wall, 1), "sccache": sccache_stats(sccache, env),
                     "variants": {r["variant"]: {"status": r["status"],
                                                 "build_s": round(r["build_seconds"], 1),
                                                 "so_bytes": r["so_bytes"],
                                                 "steps_s": ninja_seconds(project, r["variant"],
                                                                          before[r["variant"]])}
                                  for r in summary["results"]}}
        print(f"{label}/{tag}: {wall:.1f}s", flush=True)

    # The baseline: one variant alone, cold (the last environment), for "N × one variant".
    reset_builds(project)
    build_all("one_variant_cold_jobs1", fresh_cache("one"), 1, names=envs[-1:])
    reset_builds(project)
    env = fresh_cache("j1")
    build_all("cold_jobs1", env, 1)
    build_all("rerun_no_change", env, 1)
    init = project / "torch-ext" / "img2gray" / "__init__.py"
    original = init.read_text()
    init.write_text(original + "\n# a Python-only change\n")
    build_all("python_only_change", env, 1)
    init.write_text(original)
    reset_builds(project)
    build_all("warm_cache_jobs1", env, 1)
    reset_builds(project)
    build_all("cold_jobs2", fresh_cache("j2"), 2)
    reset_builds(project)
    env = {**base, "KBUILD_COMPILER_CACHE": "none"}
    build_all("no_cache_jobs1", env, 1)
    subprocess.run([sccache, "--stop-server"], capture_output=True, env={**os.environ, **base})
    results.setdefault("builds", {})[label] = runs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--phase", choices=["envs", "builds", "locks", "all"], default="all")
    ap.add_argument("--envs", default=",".join(ENVS))
    ap.add_argument("--builder", type=Path, help="another kbuild package folder to run")
    ap.add_argument("--label", default="current")
    args = ap.parse_args()
    envs = args.envs.split(",")
    project = BENCH / "proj"
    if not project.exists():
        project.mkdir(parents=True)
        for part in ("build.toml", "csrc", "torch-ext", "pixi.toml", "locks"):
            src = REPO / part
            (shutil.copytree if src.is_dir() else shutil.copy2)(src, project / part)
    results = json.loads(OUT.read_text()) if OUT.is_file() else {}
    results["machine"] = {"cpus": os.cpu_count(), "envs": envs}
    if args.phase in ("envs", "all"):
        phase_envs(envs, results)
        OUT.write_text(json.dumps(results, indent=1) + "\n")
    if args.phase in ("builds", "all"):
        phase_builds(envs, results, args.builder, args.label)
        OUT.write_text(json.dumps(results, indent=1) + "\n")
    if args.phase in ("locks", "all"):
        phase_locks(results)
        OUT.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
