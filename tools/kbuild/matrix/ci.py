"""The CI jobs of a project's matrix (`kbuild envs --ci pr|release --json`), as the workflow
that `kbuild init` writes fans them out: one build job per variant and platform.

- `release`: every variant `build-all` would build (`buildall.plan_jobs`: a backend the manifest
  lists, one environment per stable-ABI or noarch variant), on each Linux platform the
  environment has.
- `pr`: one environment per backend, on linux-64: the newest torch whose toolkit comes from PyPI
  (a stock runner builds it without a CUDA container), then the newest toolkit.

Environments whose PyPI wheels hold no nvcc (CUDA 12) build in NVIDIA's CUDA container.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from packaging.version import Version

from ..core.errors import BuildError
from .buildall import Job, env_variant, plan_jobs
from .matrix import EnvSpec

Mode = Literal["pr", "release"]
MODES = ("pr", "release")
RUNNERS = {"linux-64": "ubuntu-24.04", "linux-aarch64": "ubuntu-24.04-arm"}
# The newest patch release of each CUDA 12 toolkit on Docker Hub (nvidia/cuda:<X.Y.Z>-devel-…).
CUDA_PATCH = {"12.6": "12.6.3", "12.8": "12.8.1", "12.9": "12.9.1"}


@dataclass(frozen=True)
class CiJob:
    env: str
    variant: str
    backend: str
    platform: str
    runner: str
    container: str  # "" (the runner itself) or a CUDA devel image for a toolkit PyPI lacks
    cuda: str       # "" for CPU


def container(spec: EnvSpec) -> str:
    if spec.cuda is None or spec.toolkit_wheels:
        return ""
    patch = CUDA_PATCH.get(spec.cuda, f"{spec.cuda}.0")
    return f"nvidia/cuda:{patch}-devel-ubuntu24.04"


def _pr_rank(job: Job) -> tuple[bool, Version, Version]:
    spec = job.spec
    return (spec.cuda is None or bool(spec.toolkit_wheels), Version(spec.torch_version),
            Version(spec.cuda or "0"))


def ci_jobs(project: Path, specs: list[EnvSpec], mode: str) -> list[CiJob]:
    if mode not in MODES:
        raise BuildError(f"--ci {mode!r}: expected pr or release", key="--ci",
                         hint="pr: one environment per backend; release: every environment")
    jobs, _ = plan_jobs(project, specs)
    if mode == "pr":
        best: dict[str, Job] = {}
        for job in jobs:
            if job.spec.backend not in best or _pr_rank(job) > _pr_rank(best[job.spec.backend]):
                best[job.spec.backend] = job
        jobs = list(best.values())
    from ..core import manifest as manifest_mod
    manifest = manifest_mod.load(project, warn=lambda _: None)
    rows: list[CiJob] = []
    for job in jobs:
        spec = job.spec
        platforms = [p for p in spec.platforms if p in RUNNERS]
        if mode == "pr" or manifest.is_noarch:  # a noarch variant is the same on every platform
            platforms = [p for p in platforms if p == "linux-64"][:1] or platforms[:1]
        for platform in platforms:
            variant, _ = env_variant(manifest, spec, project, platform)
            rows.append(CiJob(spec.name, variant or job.variant, spec.backend, platform,
                              RUNNERS[platform], container(spec), spec.cuda or ""))
    return rows


def as_json(jobs: list[CiJob]) -> list[dict]:
    return [asdict(j) for j in jobs]
