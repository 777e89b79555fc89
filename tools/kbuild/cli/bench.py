"""`kbuild bench`: build a kernel project if needed, run its benchmarks, summarise.

Every `PROJECT/benchmarks/benchmark*.py` runs as its own process with
`--variant-dir VARIANT --out OUT --device DEVICE [--quick]`; each writes OUT/<kernel>.json and
OUT/<kernel>.png and prints its table (see tools/kbuild_bench/harness.py). Registered on the
main app by cli.py.
"""

from __future__ import annotations

import fnmatch
import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..core.backend import COMPILED_BACKENDS, Backend
from ..core.errors import BuildError
from ..core.layout import Layout
from ..core.manifest import inside
from ..core.runner import call
from .app import ProjectArg, app, out, table as make_table, warn


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
    from ..core.layout import METADATA
    from ..stages.check import check_variant, variant_dirs
    if (variant / METADATA).is_file():
        found = [variant]
    else:
        found = [d for d in variant_dirs(variant) if (d / METADATA).is_file()] if variant.is_dir() else []
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


def build_variant(project: Path, device: str) -> Path:
    """Builds (no-op when up to date) the project's variant for `device`; returns its folder."""
    from ..core import manifest as manifest_mod
    from ..stages import pipeline
    manifest = manifest_mod.load(project, warn=warn)
    if device not in manifest.general.backends:
        raise BuildError(f"the project has no {device} backend (backends: "
                         f"{', '.join(manifest.general.backends)})", file=project / "build.toml",
                         hint="pass --device with one of them")
    results = pipeline.build(project, backends=[device], warn=warn)
    for r in results:
        out.print(f"{'built' if r.changed else 'up to date'} {r.variant} in {r.seconds:.1f}s",
                   highlight=False)
    return results[0].path


def run_script(script: Path, project: Path, variant: Path, out_dir: Path, device: str,
               quick: bool, extra: list[str]) -> tuple[int, float]:
    cmd = [sys.executable, str(script), "--variant-dir", str(variant), "--out", str(out_dir),
           "--device", device, *(["--quick"] if quick else []), *extra]
    env = dict(os.environ)
    tools = str(Path(__file__).resolve().parents[2])  # so the script finds kbuild_bench
    env["PYTHONPATH"] = os.pathsep.join(p for p in (tools, env.get("PYTHONPATH")) if p)
    env.setdefault("PYTHONUNBUFFERED", "1")
    start = time.monotonic()
    code = call(cmd, cwd=project, env=env)
    return code, time.monotonic() - start


def summary_table(results: list[dict]):
    table = make_table("kernel", "case", "ours us/call", "GB/s", "x copy", "flushed x copy",
                  "ours vs baselines", "ok",
                  title="ours, per case: calls back to back, wall clock per call (x copy = "
                        "achieved / device-to-device copy bandwidth; flushed = one call after "
                        "an L2 flush)", title_justify="left")
    fmt = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
    for res in results:
        for r in res.get("rows", []):
            if r.get("impl") != "ours":
                continue
            case = f"{r['group']} {r['case']}" if r.get("group") else r["case"]
            if r.get("kind") == "latency":
                case += " (decode)"
            vs = ", ".join(f"{k} {v:.2f}x" for k, v in (r.get("speedup") or {}).items())
            per_call = r["median_ms"] * 1e3 if r.get("median_ms") else None
            table.add_row(res["kernel"], case, fmt(per_call, ".2f"), fmt(r.get("gbps"), ".1f"),
                          fmt(r.get("x_copy"), ".3f"), fmt(r.get("flushed_x_copy"), ".3f"),
                          vs or "-", "yes" if r.get("ok") else "[red]NO[/]")
    return table


@app.command()
def bench(
    project: ProjectArg = Path("."),
    variant_dir: Annotated[Optional[Path], typer.Option(
        help="A built variant (or a folder of variants) to benchmark; default: build the "
             "project's variant for --device (no-op when up to date).")] = None,
    out_dir: Annotated[Optional[Path], typer.Option(
        "--out", help="Where the JSON and PNG results go; default: PROJECT/.kbuild/bench.")] = None,
    device: Annotated[Optional[str], typer.Option(
        help="cuda or cpu; default: cuda when torch sees a GPU.")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Few small cases (a smoke run).")] = False,
    only: Annotated[Optional[list[str]], typer.Option(
        help="Only these benchmark scripts (names or globs, e.g. rmsnorm).")] = None,
    no_compile: Annotated[bool, typer.Option(
        "--no-compile", help="Skip the torch.compile baselines.")] = False,
    reps: Annotated[Optional[int], typer.Option(help="Timed calls per implementation.")] = None,
) -> None:
    """Run the project's benchmarks/benchmark*.py against a built variant; JSON, PNG, tables."""
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
        variant = build_variant(project, device)
    results_dir = (out_dir or Layout.of(project).bench).resolve()
    results_dir.mkdir(parents=True, exist_ok=True)
    extra = [*(["--no-compile"] if no_compile else []),
             *([f"--reps={reps}"] if reps else [])]

    runs = []
    for script in scripts:
        out.print(f"[bold]== {script.relative_to(project)}[/] ({device}, {variant.name})",
                   highlight=False)
        before = {p: p.stat().st_mtime_ns for p in results_dir.glob("*.json")}
        code, seconds = run_script(script, project, variant, results_dir, device, quick, extra)
        made = [p for p in sorted(results_dir.glob("*.json"))
                if before.get(p) != p.stat().st_mtime_ns]
        runs.append((script, code, seconds, made))

    status = make_table("benchmark", "status", "time", "results", title=f"kbuild bench {project.name}",
                   title_justify="left")
    loaded = []
    for script, code, seconds, made in runs:
        for path in made:
            try:
                loaded.append(json.loads(path.read_text()))
            except (OSError, ValueError) as e:
                warn(f"unreadable {path}: {e}")
        status.add_row(script.name, "[green]ok[/]" if code == 0 else f"[red]FAILED ({code})[/]",
                       f"{seconds:.1f}s", ", ".join(p.name for p in made) or "-")
    out.print(status)
    for res in loaded:
        copy = res.get("copy", {}).get("gbps")
        out.print(f"{res['kernel']}: {res.get('device_name')}, copy bandwidth "
                   f"{copy:.1f} GB/s" if copy else f"{res['kernel']}: no copy figure",
                   highlight=False)
    if loaded:
        out.print(summary_table(loaded))
    out.print(f"results in {results_dir}", highlight=False)
    if any(code for _, code, _, _ in runs):
        raise typer.Exit(1)
