"""What a local build saves by compiling a kernel its GPU cannot run as PTX only: nvcc's CPU
time (user + system of nvcc and its children) for single translation units, with the exact
compile line of the generated build, as SASS for the kernel's declared capability (what
upstream compiles) and as PTX only (`code=[compute_X]`, what `--cuda-capabilities` does here).

The project (a copy: its .kbuild/ is written) is planned for a release build, generated and
configured for the target interpreter's torch; each unit is then compiled each way once:

    .venv/bin/python benchmarks/bench_ptx_only.py COPY_OF_PROJECT --python CUDA_PY \\
        --unit sm100/decode/head64/instantiations/v32.cu [--unit ...] [--out FILE.json]
        [--cxx20]  # units that ask for C++17, which torch >= 2.12's headers refuse
        [--include DIR]  # headers the toolkit lacks (cuSPARSE for torch's CUDAContext.h)

KBUILD_CUTLASS_SUBSTITUTE=1 lets a project whose CUTLASS version has no release here plan.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import time
from pathlib import Path

from kbuild.stages import compile as comp
from kbuild.stages import pipeline
from kbuild.stages.generate import generate


def configured(project: Path, python: str) -> Path:
    """compile_commands.json of the project's release build for `python`'s torch."""
    os.environ["KBUILD_COMPILER_CACHE"] = "none"  # the compile lines without a launcher
    (plan,) = pipeline.plans(project, python=python, warn=print)
    work = generate(plan)
    build = work / "cmake-build"
    comp.configure(comp.configure_args(plan, work, build, 2, False), work, build,
                   work / "build.log", dict(os.environ))
    return build / "compile_commands.json"


def timed(cmd: list[str], cwd: str) -> tuple[float, float, int, str]:
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    return (time.monotonic() - start, usage.ru_utime + usage.ru_stime,
            os.waitstatus_to_exitcode(status), out.decode(errors="replace"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("project", type=Path)
    ap.add_argument("--python", required=True)
    ap.add_argument("--unit", action="append", required=True, help="a .cu path suffix")
    ap.add_argument("--cxx20", action="store_true")
    ap.add_argument("--include", action="append", default=[])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    entries = json.loads(configured(args.project.resolve(), args.python).read_text())
    rows = []
    for unit in args.unit:
        entry = next(e for e in entries if e["file"].endswith(unit))
        base = shlex.split(entry["command"])
        if args.cxx20:
            base = [a.replace("-std=c++17", "-std=c++20") for a in base]
        for d in args.include:
            base[1:1] = ["-isystem", d]
        for way in ("sass", "ptx"):
            cmd = base if way == "sass" else [
                re.sub(r"code=\[sm_(\w+)\]", r"code=[compute_\1]", a) for a in base]
            out = Path(entry["directory"]) / f"bench-{Path(unit).stem}.{way}.o"
            cmd = list(cmd)
            cmd[cmd.index("-o") + 1] = str(out)
            wall, cpu, rc, log = timed(cmd, entry["directory"])
            row = {"unit": unit, "way": way, "cpu_s": round(cpu, 1), "wall_s": round(wall, 1),
                   "rc": rc, "object_bytes": out.stat().st_size if out.is_file() else None,
                   "gencode": [a for a in cmd if "generate-code" in a]}
            if rc:
                row["log"] = log[-2000:]
            print(json.dumps(row), flush=True)
            rows.append(row)
    if args.out:
        args.out.write_text(json.dumps({"project": args.project.name, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
