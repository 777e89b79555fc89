"""`kbuild bench`: build a kernel project if needed, run its benchmarks, collect their results.

Every `PROJECT/benchmarks/benchmark*.py` runs as its own process with
`--variant-dir VARIANT --out OUT --device DEVICE [--quick]`; each writes OUT/<kernel>.json and
OUT/<kernel>.png and prints its table (see tools/kbuild_bench/harness.py). The command and its
tables are cli/bench.py.
"""

from __future__ import annotations

import fnmatch
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .core.backend import COMPILED_BACKENDS, Backend
from .core.errors import BuildError
from .core.layout import Layout
from .core.manifest import inside
from .core.runner import call

Log = Callable[[str], None]


def find_benchmarks(project: Path, only: list[str] | None = None) -> list[Path]:
    """The benchmark scripts to run (`project` resolved). One that leads out of the project (a
    symlink, or benchmarks/ itself linked elsewhere) is refused: bench runs only project files."""
    scripts = sorted((project / "benchmarks").glob("benchmark*.py"))
    if only:
        pats = [p for item in only for p in item.split(",") if p]
        scripts = [s for s in scripts if any(fnmatch.fnmatch(s.name, p) or fnmatch.fnmatch(s.stem, p)
                                             or s.stem == f"benchmark_{p}" for p in pats)]
    for script in scripts:
        if not inside(project, script):
            raise BuildError(f"{script.relative_to(project)} leads to {script.resolve()}, outside "
                             "the project", file=script,
                             hint="replace the link with the file itself (kbuild bench runs only "
                                  "files of the project)")
    return scripts


def check_variants(variant: Path) -> list[Path]:
    """The variants under `variant` (a built variant, or a folder of them), each passing
    `kbuild check`'s file checks (metadata, digest, layout, its .so) before it is benchmarked."""
    from .core.built import variant_dirs
    from .core.layout import METADATA
    from .stages.check import check_variant
    if (variant / METADATA).is_file():
        found = [variant]
    else:
        found = variant_dirs(variant, built=True)
    if not found:
        raise BuildError("not a built variant (no metadata.json) nor a folder of variants",
                         file=variant, hint="pass build/<variant>, or leave out --variant-dir to build")
    for folder in found:
        problems = check_variant(folder, load=False).problems
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise BuildError(f"{folder.name} is not a complete variant: {problems[0]}{more}",
                             file=folder, hint=f"rebuild it, or see `kbuild check {folder}`")
    return found


def default_device() -> str:
    import torch
    return Backend.CUDA.value if torch.cuda.is_available() else Backend.CPU.value


def build_variant(project: Path, device: str, log: Log, warn: Log) -> Path:
    """Builds (no-op when up to date) the project's variant for `device`; returns its folder."""
    from .core import manifest as manifest_mod
    from .stages import pipeline
    manifest = manifest_mod.load(project, warn=warn)
    if device not in manifest.general.backends:
        raise BuildError(f"the project has no {device} backend (backends: "
                         f"{', '.join(manifest.general.backends)})", file=project / "build.toml",
                         hint="pass --device with one of them")
    results = pipeline.build(project, backends=[device], warn=warn)
    for r in results:
        log(f"{'built' if r.changed else 'up to date'} {r.variant} in {r.seconds:.1f}s")
    return results[0].path


def run_script(script: Path, project: Path, variant: Path, out_dir: Path, device: str,
               quick: bool, extra: list[str]) -> tuple[int, float]:
    cmd = [sys.executable, str(script), "--variant-dir", str(variant), "--out", str(out_dir),
           "--device", device, *(["--quick"] if quick else []), *extra]
    env = dict(os.environ)
    tools = str(Path(__file__).resolve().parents[1])  # so the script finds kbuild_bench
    env["PYTHONPATH"] = os.pathsep.join(p for p in (tools, env.get("PYTHONPATH")) if p)
    env.setdefault("PYTHONUNBUFFERED", "1")
    start = time.monotonic()
    code = call(cmd, cwd=project, env=env)
    return code, time.monotonic() - start


@dataclass(frozen=True)
class ScriptRun:
    script: Path
    code: int            # its exit status
    seconds: float
    made: list[Path]     # the result files it wrote (new or rewritten)


@dataclass
class BenchRun:
    project: Path
    device: str
    variant: Path
    results_dir: Path
    runs: list[ScriptRun] = field(default_factory=list)
    results: list[dict] = field(default_factory=list)  # every readable result file's JSON

    @property
    def failed(self) -> bool:
        return any(r.code for r in self.runs)


def run(project: Path, *, variant_dir: Path | None = None, out_dir: Path | None = None,
        device: str | None = None, quick: bool = False, only: list[str] | None = None,
        no_compile: bool = False, reps: int | None = None,
        on_script: Callable[[Path, str, Path], None] = lambda *_: None,
        log: Log = lambda _: None, warn: Log = lambda _: None) -> BenchRun:
    """`kbuild bench`: the variant (given, checked; else built for `device`), then each
    benchmark script in turn (`on_script(script, device, variant)` before it runs)."""
    project = project.resolve()
    if not (project / "build.toml").is_file():
        raise BuildError("not a kernel project (no build.toml)", file=project)
    scripts = find_benchmarks(project, only)
    if not scripts:
        raise BuildError("no benchmarks to run", file=project / "benchmarks",
                         hint="add benchmarks/benchmark_<name>.py (see tools/kbuild_bench/harness.py)")
    device = device or default_device()
    if device not in COMPILED_BACKENDS:
        raise BuildError(f"unknown --device {device!r}",
                         hint=f"use {' or '.join(COMPILED_BACKENDS)}")
    if variant_dir:
        variant = variant_dir.resolve()
        if not variant.exists():
            raise BuildError("no such variant folder", file=variant)
        check_variants(variant)
    else:
        variant = build_variant(project, device, log, warn)
    results_dir = (out_dir or Layout.of(project).bench).resolve()
    results_dir.mkdir(parents=True, exist_ok=True)
    extra = [*(["--no-compile"] if no_compile else []),
             *([f"--reps={reps}"] if reps else [])]
    done = BenchRun(project, device, variant, results_dir)
    for script in scripts:
        on_script(script, device, variant)
        before = {p: p.stat().st_mtime_ns for p in results_dir.glob("*.json")}
        code, seconds = run_script(script, project, variant, results_dir, device, quick, extra)
        made = [p for p in sorted(results_dir.glob("*.json"))
                if before.get(p) != p.stat().st_mtime_ns]
        done.runs.append(ScriptRun(script, code, seconds, made))
    for r in done.runs:
        for path in r.made:
            try:
                done.results.append(json.loads(path.read_text()))
            except (OSError, ValueError) as e:
                warn(f"unreadable {path}: {e}")
    return done
