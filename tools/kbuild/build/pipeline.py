"""The stages in order: manifest → plan → environment → generate → compile → assemble."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..core import manifest as manifest_mod
from ..core.layout import Layout
from . import frameworks, pyops
from .assemble import install, python_files, stage
from .check import verify_build
from .compile import compile_variant
from .generate import generate
from .plan import VariantPlan, plan_noarch, plan_variant
from .torch_install import TorchInstall, read_torch_install

Log = Callable[[str], None]


@dataclass(frozen=True)
class BuildResult:
    variant: str
    path: Path
    kernel_id: str
    changed: bool
    seconds: float


def default_backends(manifest: manifest_mod.Manifest, torch: TorchInstall | None) -> list[str]:
    """A CUDA torch builds the `cuda` variant, a CPU torch the `cpu` one (if listed)."""
    if manifest.is_noarch:
        return list(manifest.general.backends)
    want = "cuda" if torch and torch.cuda else "cpu"
    return [want] if want in manifest.general.backends else [manifest.general.backends[0]]


def build_plan(plan: VariantPlan, build_dir: Path, jobs: int | None = None) -> BuildResult:
    start = time.monotonic()
    pyops.check_package(python_files(plan), plan.project)
    work = generate(plan)
    so = compile_variant(plan, work, jobs) if plan.compiled else None
    if so is not None:
        verify_build(plan, so)
    staged = stage(plan, work, so, Layout.of(plan.project, build_dir).staging)
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
    frameworks.refuse_unbuildable(manifest, project)
    if manifest.is_noarch:
        return [plan_noarch(project, manifest, b) for b in backends or manifest.general.backends]
    torch = read_torch_install(python, cache_file=Layout.of(project).torch_cache)
    return [plan_variant(project, manifest, torch, b) for b in backends or default_backends(manifest, torch)]


def build(project: Path, *, backends: list[str] | None = None, python: str | None = None,
          build_dir: Path | None = None, jobs: int | None = None,
          warn: Log | None = None) -> list[BuildResult]:
    build_dir = Layout.of(project, build_dir).build_dir
    return [build_plan(p, build_dir, jobs) for p in plans(project, backends=backends,
                                                          python=python, warn=warn)]
