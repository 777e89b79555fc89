"""The stages in order: manifest → plan → environment → generate → compile → assemble."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..core import manifest as manifest_mod
from .assemble import install, stage
from .compile import compile_variant
from .generate import WORK_DIR, generate
from .plan import VariantPlan, plan_noarch, plan_variant
from .torchenv import TorchEnv, read_torch_env

Log = Callable[[str], None]


@dataclass(frozen=True)
class BuildResult:
    variant: str
    path: Path
    kernel_id: str
    changed: bool
    seconds: float


def default_backends(manifest: manifest_mod.Manifest, env: TorchEnv | None) -> list[str]:
    """A CUDA torch builds the `cuda` variant, a CPU torch the `cpu` one (if listed)."""
    if manifest.is_noarch:
        return list(manifest.general.backends)
    want = "cuda" if env and env.cuda else "cpu"
    return [want] if want in manifest.general.backends else [manifest.general.backends[0]]


def staging_root(build_dir: Path) -> Path:
    return build_dir.parent / WORK_DIR / "staging"


def build_plan(plan: VariantPlan, build_dir: Path, jobs: int | None = None) -> BuildResult:
    start = time.monotonic()
    work = generate(plan)
    so = compile_variant(plan, work, jobs) if plan.compiled else None
    staged = stage(plan, work, so, staging_root(build_dir))
    try:
        changed = install(staged, build_dir, plan.name)
    finally:
        if staged.exists():
            shutil.rmtree(staged, ignore_errors=True)
    return BuildResult(plan.name, build_dir / plan.name, plan.kernel_id, changed,
                       time.monotonic() - start)


def plans(project: Path, *, backends: list[str] | None = None, python: str | None = None,
          warn: Log | None = None) -> list[VariantPlan]:
    project = project.resolve()
    manifest = manifest_mod.load(project, warn=warn)
    if manifest.is_noarch:
        return [plan_noarch(project, manifest, b) for b in backends or manifest.general.backends]
    env = read_torch_env(python, cache_dir=project / WORK_DIR)
    return [plan_variant(project, manifest, env, b) for b in backends or default_backends(manifest, env)]


def build(project: Path, *, backends: list[str] | None = None, python: str | None = None,
          build_dir: Path | None = None, jobs: int | None = None,
          warn: Log | None = None) -> list[BuildResult]:
    project = project.resolve()
    build_dir = (build_dir or project / "build").resolve()
    return [build_plan(p, build_dir, jobs) for p in plans(project, backends=backends,
                                                          python=python, warn=warn)]
