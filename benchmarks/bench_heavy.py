"""Heavy kernels' build time: the builder as it is against the same builder with nvcc's split
compile and slowest-first scheduling switched off, kernels-community projects built unchanged.

    .venv/bin/python benchmarks/bench_heavy.py --corpus ../shared/corpus/kernels-community-40d4194f-heavy.tar.gz
        [--projects punica-sgmv paged-attention layer-norm] [--modes off on release-off release-on]
        [--cuda-capabilities native] [--env torch214-cu130 | --python PY [--cuda-home DIR]]
        [--limit SECONDS] [--force] [--out docs/bench_heavy.json] [--keep DIR]

--corpus is a folder or a .tar.gz of kernel-builder projects. Modes, each a `kbuild build` of a
fresh copy of the project, one build at a time, no compiler cache (KBUILD_COMPILER_CACHE=none),
no precompiled torch header and no configure seed (both builds alike):

- off:          `--cuda-capabilities CAPS` with KBUILD_NVCC_SPLIT=1 and KBUILD_SCHEDULE=off;
- on:           the same build as the builder does it (split compile for a local build, and the
                sources ordered by the `off` build's step times, its .ninja_log put where the
                previous build of the project would have left it);
- release-off / release-on: every declared capability (no --cuda-capabilities), the same two
                ways; release-on with KBUILD_NVCC_SPLIT=on (the split a local build gets) unless
                --release-split policy (what the builder does for release builds today,
                SPLIT_RELEASE_BUILDS in stages/compile/__init__.py).

`on` needs the `off` build of the same project (same capabilities) in the JSON first. The JSON is
merged into (a run of one project's one mode fits a 10-minute call); --force builds again what
it holds. --limit stops a build after that many seconds and records how far it got (Ninja's
steps done of total). Prints the figures and the ratios (on / off), writes the JSON (the
machine inside) and a plot beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tools"))
import bench_build  # noqa: E402 (after the path: copy, projects: the corpus helpers)

PROJECTS = ["punica-sgmv", "paged-attention", "layer-norm"]
MODES = ["off", "on", "release-off", "release-on"]
SWITCHED_OFF = {"KBUILD_NVCC_SPLIT": "1", "KBUILD_SCHEDULE": "off"}
ALIKE = {"KBUILD_COMPILER_CACHE": "none", "KBUILD_PCH": "off", "KBUILD_CONFIGURE_SEED": "off"}
PROGRESS = re.compile(r"^\[(\d+)/(\d+)\] ", re.MULTILINE)
SPLIT_LINE = re.compile(r"compiling \((\d+ jobs.*?)\)\s*$", re.MULTILINE)
SLOWEST = re.compile(r"^slowest steps: (.*)$", re.MULTILINE)


def machine() -> dict:
    def first(cmd: list[str]) -> str:
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False).stdout
        except (OSError, subprocess.TimeoutExpired):
            return ""
        return out.strip().splitlines()[0] if out.strip() else ""
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    mem = next((int(line.split()[1]) / 2**20 for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal")), 0.0)
    return {"cores": len(os.sched_getaffinity(0)), "cpu": cpu, "memory_gib": round(mem, 1),
            "gpu": first(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"])
            or "none", "host": platform.node(), "python": sys.version.split()[0]}


def environment(args) -> tuple[str, str | None]:
    """(python, CUDA home) of the environment to build against."""
    if args.python:
        return args.python, args.cuda_home
    from kbuild.matrix.envs import realise_env
    real = realise_env(REPO, args.env, log=lambda m: print(f"{args.env}: {m}", flush=True))
    return str(real.python), str(real.cuda_home) if real.cuda_home else args.cuda_home


def ninja_log(project: Path) -> Path | None:
    logs = sorted((project / ".kbuild").glob("*/cmake-build/.ninja_log"))
    return logs[0] if logs else None


def build(project: Path, mode: str, args, python: str, cuda_home: str | None,
          previous: dict | None) -> dict:
    """One `kbuild build` of `project` in `mode`, within args.limit seconds."""
    release = mode.startswith("release")
    env = {k: v for k, v in os.environ.items() if k not in SWITCHED_OFF} | ALIKE
    if mode.endswith("off"):
        env |= SWITCHED_OFF
    elif args.on_split:
        env["KBUILD_NVCC_SPLIT"] = args.on_split
    elif release and args.release_split == "on":
        env["KBUILD_NVCC_SPLIT"] = "on"
    if previous and previous.get("ninja_log"):  # the step times of the project's previous build
        text = previous["ninja_log"].replace(previous["root"], str(project))
        where = project / ".kbuild" / previous["variant"] / "cmake-build"
        where.mkdir(parents=True, exist_ok=True)
        (where / ".ninja_log").write_text(text)
    cmd = [sys.executable, "-m", "kbuild", "build", str(project), "--backend", "cuda", "--python", python]
    cmd += ["--cuda-home", cuda_home] if cuda_home else []
    cmd += [] if release else ["--cuda-capabilities", args.cuda_capabilities]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=args.limit)
        status = "ok" if proc.returncode == 0 else f"failed (exit {proc.returncode})"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 15)
        output, _ = proc.communicate()
        status = f"stopped at the {args.limit:.0f} s limit"
    seconds = time.perf_counter() - start
    steps = PROGRESS.findall(output)
    split = SPLIT_LINE.findall(output)
    slowest = SLOWEST.findall(output)
    log = ninja_log(project)
    out = {"seconds": round(seconds, 1), "status": status, "env": {k: env[k] for k in
           ("KBUILD_NVCC_SPLIT", "KBUILD_SCHEDULE") if k in env} | ALIKE,
           "steps": f"{steps[-1][0]}/{steps[-1][1]}" if steps else "", "split": split[-1] if split else "",
           "slowest": slowest[-1] if slowest else "", "scheduled_from_previous": bool(previous),
           "root": str(project), "variant": log.parent.parent.name if log else "",
           "ninja_log": log.read_text() if log and status == "ok" else ""}
    if status != "ok":
        out["output_tail"] = output[-3000:]
    return out


def report(results: dict) -> None:
    print(f"\n{'project':16} {'mode':12} {'seconds':>8} {'ratio':>6}  status / split / slowest")
    for name, modes in results["projects"].items():
        for mode, r in modes.items():
            base = modes.get("release-off" if mode.startswith("release") else "off")
            ratio = (f"{r['seconds'] / base['seconds']:5.2f}x" if base and mode.split()[0].endswith("on")
                     and r["status"] == "ok" and base["status"] == "ok" else "")
            print(f"{name:16} {mode:12} {r['seconds']:7.1f}s {ratio:>6}  {r['status']}"
                  + (f" ({r['steps']} steps)" if r["status"] != "ok" else "") + f"; {r['split']}")
            if r["slowest"]:
                print(f"{'':30} slowest: {r['slowest']}")


def plot(results: dict, path: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    groups: dict[str, dict[str, dict]] = {}  # "project, local|release" -> mode key -> result
    for name, modes in results["projects"].items():
        for key, r in modes.items():
            kind = "release" if key.startswith("release") else "local"
            groups.setdefault(f"{name}\n{kind}", {})[key.removeprefix("release-")] = r
    keys = list(dict.fromkeys(k for g in groups.values() for k in g))
    fig, ax = plt.subplots(figsize=(max(6, 1.8 * len(groups)), 4))
    width = 0.8 / max(1, len(keys))
    for i, key in enumerate(keys):
        xs = [x + (i - (len(keys) - 1) / 2) * width for x, g in enumerate(groups.values()) if key in g]
        rs = [g[key] for g in groups.values() if key in g]
        ax.bar(xs, [r["seconds"] for r in rs], width, label=key,
               hatch=["" if r["status"] == "ok" else "//" for r in rs])
    ax.set_xticks(range(len(groups)), list(groups), fontsize=8)
    ax.set_ylabel("seconds (hatched: stopped at the limit)")
    ax.set_title(f"kbuild build, {results['machine']['cores']} cores, {results['machine']['gpu'][:40]}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, required=True, help="a folder or .tar.gz of the projects")
    ap.add_argument("--projects", nargs="+", default=PROJECTS)
    ap.add_argument("--modes", nargs="+", default=["off", "on"], choices=MODES)
    ap.add_argument("--cuda-capabilities", default="native")
    ap.add_argument("--env", default="torch214-cu130", help="environment of pixi.toml to build in")
    ap.add_argument("--python", help="a CUDA torch interpreter instead of --env")
    ap.add_argument("--cuda-home")
    ap.add_argument("--release-split", choices=["on", "policy"], default="on")
    ap.add_argument("--on-split", help="KBUILD_NVCC_SPLIT for the on builds (a count, or on), "
                    "instead of the builder's own choice; recorded in the JSON")
    ap.add_argument("--limit", type=float, default=None, help="seconds per build")
    ap.add_argument("--force", action="store_true", help="build again what the JSON holds")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "bench_heavy.json")
    ap.add_argument("--keep", type=Path, help="keep each finished build as KEEP/<mode>/<project> "
                    "(build.toml, build/, benchmarks/: for bench_split_runtime.py)")
    args = ap.parse_args()
    results = json.loads(args.out.read_text()) if args.out.is_file() else {"projects": {}}
    results["machine"] = machine()
    results["what"] = ("kbuild build of kernels-community projects, one at a time, no compiler "
                       "cache; off = KBUILD_NVCC_SPLIT=1 KBUILD_SCHEDULE=off; on = the builder as it "
                       "is, scheduled from the off build's step times")
    python, cuda_home = environment(args)
    with tempfile.TemporaryDirectory() as tmp_:
        tmp = Path(tmp_)
        if args.corpus.is_dir():
            sources = {n: args.corpus / n for n in args.projects if (args.corpus / n).is_dir()}
        else:
            sources = bench_build.projects(args.projects, args.corpus, tmp)
        for name in args.projects:
            if name not in sources:
                print(f"{name}: not in {args.corpus}")
                continue
            done = results["projects"].setdefault(name, {})
            for mode in args.modes:
                key = f"{mode} split={args.on_split}" if args.on_split and mode.endswith("on") else mode
                if key in done and done[key]["status"] == "ok" and not args.force:
                    print(f"{name} {key}: in {args.out} already ({done[key]['seconds']} s)")
                    continue
                previous = done.get("release-off" if mode.startswith("release") else "off") \
                    if mode.endswith("on") else None
                if mode.endswith("on") and not (previous and previous["status"] == "ok"):
                    print(f"{name} {mode}: needs the {mode.replace('on', 'off')} build first")
                    continue
                work = tmp / "work" / name  # the same path for every mode: the logs' paths match
                shutil.rmtree(work, ignore_errors=True)
                project = bench_build.copy(sources[name], work)
                print(f"{name} {mode}: building ...", flush=True)
                key = f"{mode} split={args.on_split}" if args.on_split and mode.endswith("on") else mode
                done[key] = build(project, mode, args, python, cuda_home, previous) | {
                    "capabilities": "every declared" if mode.startswith("release") else args.cuda_capabilities}
                print(f"{name} {key}: {done[key]['seconds']} s, {done[key]['status']}; "
                      f"{done[key]['split']}", flush=True)
                if args.keep and done[key]["status"] == "ok":
                    kept = args.keep / key.replace(" ", "_") / name
                    shutil.rmtree(kept, ignore_errors=True)
                    kept.mkdir(parents=True)
                    for part in ("build.toml", "build", "benchmarks"):
                        if (project / part).is_dir():
                            shutil.copytree(project / part, kept / part, symlinks=True)
                        elif (project / part).is_file():
                            shutil.copy2(project / part, kept / part)
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(results, indent=1) + "\n")
    report(results)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    plot(results, args.out.with_suffix(".png"))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
