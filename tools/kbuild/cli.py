"""The `kbuild` command line: a thin layer over the pipeline stages."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from .errors import BuildError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Build PyTorch kernels in the Hugging Face `kernels` format.")
out = Console()
err = Console(stderr=True)

ProjectArg = Annotated[Path, typer.Argument(help="Kernel project directory.", show_default=".")]
BackendOpt = Annotated[Optional[list[str]], typer.Option(
    "--backend", "-b", help="Backend to build (repeatable); default: the torch's own.")]
PythonOpt = Annotated[Optional[str], typer.Option(
    help="Interpreter whose torch to build against; default: this one.")]
BuildDirOpt = Annotated[Optional[Path], typer.Option(help="Output folder; default: PROJECT/build.")]


def warn(msg: str) -> None:
    err.print(f"[yellow]warning:[/] {msg}", highlight=False)


@app.command()
def generate(project: ProjectArg = Path("."), backend: BackendOpt = None,
             python: PythonOpt = None) -> None:
    """Write the build files (CMake project, registration.h, _ops.py) from templates."""
    from . import generate as gen, pipeline
    for plan in pipeline.plans(project, backends=backend, python=python, warn=warn):
        out.print(f"{plan.name}: {gen.generate(plan)}")


@app.command()
def build(project: ProjectArg = Path("."), backend: BackendOpt = None, python: PythonOpt = None,
          build_dir: BuildDirOpt = None,
          jobs: Annotated[Optional[int], typer.Option(help="Parallel compile jobs.")] = None) -> None:
    """Compile for the torch of PYTHON and assemble build/<variant>/."""
    from . import pipeline
    for r in pipeline.build(project, backends=backend, python=python, build_dir=build_dir,
                            jobs=jobs, warn=warn):
        state = "built" if r.changed else "up to date"
        out.print(f"[green]{state}[/] {r.variant} ({r.kernel_id}) in {r.seconds:.1f}s -> {r.path}")


def main() -> None:
    try:
        app()
    except BuildError as e:
        err.print("[red]error:[/] ", end="", highlight=False)
        err.print(str(e), highlight=False, markup=False)
        sys.exit(2)
    except KeyboardInterrupt:
        err.print("interrupted", highlight=False)
        sys.exit(130)
