"""Commands of the build stages: generate, build, check, clean, update-build, dev."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..core.errors import BuildError
from ..core.layout import MANIFEST, Layout
from .app import app, out, warn

ProjectArg = Annotated[Path, typer.Argument(help="Kernel project directory.", show_default=".")]
BackendOpt = Annotated[Optional[list[str]], typer.Option(
    "--backend", "-b", help="Backend to build (repeatable); default: the torch's own.")]
PythonOpt = Annotated[Optional[str], typer.Option(
    help="Interpreter whose torch to build against; default: this one.")]
BuildDirOpt = Annotated[Optional[Path], typer.Option(help="Output folder; default: PROJECT/build.")]
EnvOpt = Annotated[Optional[str], typer.Option(
    "--env", "-e", help="Build in this environment of pixi.toml, realised from PyPI (from its lock).")]


@app.command()
def generate(project: ProjectArg = Path("."), backend: BackendOpt = None,
             python: PythonOpt = None) -> None:
    """Write the build files (CMake project, registration.h, _ops.py) from templates."""
    from ..build import generate as gen
    from ..build import pipeline
    for plan in pipeline.plans(project, backends=backend, python=python, warn=warn):
        out.print(f"{plan.name}: {gen.generate(plan)}")


@app.command()
def build(project: ProjectArg = Path("."), backend: BackendOpt = None, python: PythonOpt = None,
          build_dir: BuildDirOpt = None, env: EnvOpt = None,
          jobs: Annotated[Optional[int], typer.Option(help="Parallel compile jobs.")] = None) -> None:
    """Compile for the torch of PYTHON (or of --env) and assemble build/<variant>/."""
    from ..build import pipeline
    if env:
        if python:
            raise BuildError("--env and --python exclude each other")
        from .matrix import env_interpreter
        python = env_interpreter(project, env)
    for r in pipeline.build(project, backends=backend, python=python, build_dir=build_dir,
                            jobs=jobs, warn=warn):
        state = "built" if r.changed else "up to date"
        out.print(f"[green]{state}[/] {r.variant} ({r.kernel_id}) in {r.seconds:.1f}s -> {r.path}")


@app.command()
def check(project: ProjectArg = Path("."), build_dir: BuildDirOpt = None,
          python: PythonOpt = None,
          load: Annotated[bool, typer.Option(help="Also load each variant with kernels.")] = True
          ) -> None:
    """Verify build/: metadata, digest, layout, ABI (manylinux_2_28 + abi3) and loading."""
    from rich.table import Table

    from ..build.check import check_variant, variant_dirs
    root = Layout.of(project, build_dir).build_dir
    if not root.is_dir() or not variant_dirs(root):
        raise BuildError("no variants to check", file=root, hint="run `kbuild build` first")
    table = Table("variant", "result", "details")
    failed = 0
    for variant in variant_dirs(root):
        report = check_variant(variant, python=python, load=load)
        failed += not report.ok
        status = "[green]ok[/]" if report.ok else "[red]FAILED[/]"
        table.add_row(variant.name, status, "\n".join(report.problems + report.notes))
    out.print(table)
    if failed:
        raise typer.Exit(1)


@app.command()
def clean(project: ProjectArg = Path(".")) -> None:
    """Remove generated files (.kbuild/) and built variants (build/<variant>/), nothing else."""
    import shutil

    layout = Layout.of(project)
    removed = []

    def unfollowed(path: Path) -> bool:  # a link may lead out of the project: never followed
        if path.is_symlink():
            warn(f"{path} is a symlink (to {path.resolve()}); not following it, left as it is")
        return path.is_symlink()

    work = layout.work
    if not unfollowed(work) and work.is_dir():
        shutil.rmtree(work)
        removed.append(work)
    build_root = layout.build_dir
    if not unfollowed(build_root) and build_root.is_dir():
        for variant in sorted(build_root.iterdir()):
            if not unfollowed(variant) and variant.is_dir() and (variant / "metadata.json").is_file():
                shutil.rmtree(variant)
                removed.append(variant)
        if not any(build_root.iterdir()):
            build_root.rmdir()
    for path in removed:
        out.print(f"removed {path}")


@app.command("update-build")
def update_build(project: ProjectArg = Path("."),
                 dry_run: Annotated[bool, typer.Option(help="Print, don't write.")] = False) -> None:
    """Rewrite an older build.toml as edition 5."""
    import os

    import tomli_w

    from ..core import editions

    from ..core import manifest
    project = project.resolve()
    raw = manifest.read_raw(project)
    upgraded, notes = editions.upgrade(raw)
    if not notes:
        out.print(f"{project / MANIFEST} is already edition {editions.CURRENT_EDITION}")
        return
    text = tomli_w.dumps(upgraded)
    manifest.Manifest.model_validate(upgraded)  # fail before writing anything invalid
    if dry_run:
        out.print(text, highlight=False, markup=False)
        return
    path = project / MANIFEST
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    for note in notes:
        out.print(f"- {note}")
    out.print(f"rewrote {path} (comments are not kept)")


@app.command()
def dev(project: ProjectArg = Path("."), backend: BackendOpt = None,
        pytest_args: Annotated[Optional[list[str]], typer.Argument(
            help="Extra pytest arguments (after --).")] = None) -> None:
    """The fast loop: rebuild what changed, then run the kernel's tests against the build."""
    import subprocess
    import sys as _sys

    from ..build import pipeline
    project = project.resolve()
    for r in pipeline.build(project, backends=backend, warn=warn):
        out.print(f"{'built' if r.changed else 'up to date'} {r.variant} in {r.seconds:.1f}s")
    tests = project / "tests"
    if not tests.is_dir():
        raise BuildError("no tests/ folder", file=project, hint="add pytest tests under tests/")
    code = subprocess.call([_sys.executable, "-m", "pytest", str(tests), "-q",
                            *(pytest_args or [])], cwd=project)
    raise typer.Exit(code)
