"""`kbuild init PATH`: options → `scaffold.options`, then `scaffold.create`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .. import scaffold
from .app import app, log, warn


@app.command()
def init(
    path: Annotated[Path, typer.Argument(
        help="Folder of the new project; its last part is the kernel's name (e.g. my-kernel).")],
    backends: Annotated[Optional[list[str]], typer.Option(
        help="Kernels to scaffold: cpu, cuda or cpu,cuda.", show_default="cpu,cuda")] = None,
    noarch: Annotated[bool, typer.Option(
        "--noarch", help="A Python-only kernel ([torch-noarch]): no compiler needed.")] = False,
    repo_id: Annotated[Optional[str], typer.Option(
        "--repo-id", help="Hub repo to upload to (org/name); default: your-org/NAME.")] = None,
    git: Annotated[bool, typer.Option(help="Initialise a git repository (files staged).")] = True,
) -> None:
    """Create a new kernel project in PATH, ready to build, test, benchmark and upload.

    It holds build.toml, CPU and CUDA kernels, the binding, a Python wrapper with a fake
    implementation, tests, a benchmark, CARD.md and pixi.toml with the environment matrix."""
    target, opts = scaffold.options(path, backends, noarch, repo_id)
    scaffold.create(target, opts, git=git, warn=warn)
    for line in scaffold.next_steps(target, opts, repo_id_given=repo_id is not None):
        log(line)
