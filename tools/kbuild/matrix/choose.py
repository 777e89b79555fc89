"""`--variant NAME`: which build makes a variant — the target torch's, or an environment's of the
matrix (pixi.toml, else the builder's default one) — as kernel-builder's `build --variant` builds
any variant of its flake. A name the project does not make is one error listing those it makes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..core import manifest as manifest_mod
from ..core.errors import BuildError
from ..core.layout import MANIFEST, Layout
from ..stages.plan import made_for
from ..stages.torch_install import read_torch_install
from . import matrix as matrix_mod
from .jobs import plan_jobs
from .matrix import EnvSpec


@dataclass(frozen=True)
class Choice:
    """Where variant `name` is built: with `backend`, for the target torch (`env` None) or in
    the matrix environment `env`."""
    name: str
    backend: str
    env: str | None = None


def matrix_variants(project: Path, env: str | None = None,
                    specs: list[EnvSpec] | None = None) -> dict[str, Choice]:
    """The variants the matrix's environments make (only `env`'s, or those of `specs`, when
    given), by name."""
    if specs is None:
        mx = matrix_mod.load(project)
        specs = [mx.get(env)] if env else mx.envs
    jobs, _ = plan_jobs(project, specs)
    return {j.variant: Choice(j.variant, j.spec.backend, j.spec.name) for j in jobs}


def in_matrix(project: Path, name: str, specs: list[EnvSpec]) -> Choice:
    """build-all --variant: the environment of `specs` that builds `name`."""
    made = matrix_variants(project, specs=specs)
    if name not in made:
        raise _none(project, name, "the selected environments", sorted(made, key=_natural))
    return made[name]


def _natural(name: str) -> list:
    """torch27 before torch210: numbers compared as numbers."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _none(project: Path, name: str, where: str, names: list[str]) -> BuildError:
    return BuildError(f"the project makes no variant {name!r} for {where}",
                      file=project / MANIFEST, key="general.backends",
                      hint=("variants it makes: " + ", ".join(names)) if names
                      else "it makes none there; check general.backends and the environments")


def choose(project: Path, name: str, *, python: str | None = None, explicit_python: bool = False,
           env: str | None = None) -> Choice:
    """The build that makes `name`: for the target torch (`python`) when it makes it, else in
    the matrix environment that builds it. `env` (--env) or an `explicit_python` (--python)
    narrows the choice to that environment or that torch."""
    project = project.resolve()
    manifest = manifest_mod.load(project)
    here: dict[str, Choice] = {}
    if env is None:
        try:
            torch = None if manifest.is_noarch else read_torch_install(
                python, cache_file=Layout.of(project).torch_cache)
            here = {v: Choice(v, str(b)) for v, b in made_for(project, manifest, torch).items()}
        except BuildError:
            if explicit_python:
                raise
    if name in here:
        return here[name]
    elsewhere = {} if explicit_python else matrix_variants(project, env)
    if name in elsewhere:
        return elsewhere[name]
    names = sorted(here, key=_natural) + sorted(set(elsewhere) - set(here), key=_natural)
    where = (f"environment {env}" if env else "this torch" if explicit_python
             else "this torch and the environments of the matrix")
    raise _none(project, name, where, names)
