"""The CI jobs of a project's matrix, as the generated workflows fan them out
(`kbuild ci-plan`, `kbuild envs --ci pr|release`; the workflows: `kbuild/workflows/`).

Builds, one job per variant and platform:
- `release`: every variant `build-all` would build (`jobs.plan_jobs`: a backend the manifest
  lists, one environment per stable-ABI variant), on each Linux platform the environment has;
  a noarch project: one job per backend it lists (a noarch variant needs no environment).
- `pr`: one environment per backend, on linux-64: the newest torch whose toolkit comes from PyPI
  (a stock runner builds it without a CUDA container), then the newest toolkit.

Environments whose PyPI wheels hold no nvcc (CUDA 12) build in NVIDIA's CUDA container.

Tests, one job per built variant that has a runner: CPU variants where they were built, CUDA
variants on the self-hosted GPU runner of their architecture (x86_64: `--gpu-runner`; aarch64
only with `--gpu-runner-aarch64`, else not tested and said so). Other noarch backends (ROCm, XPU,
Metal) have no runner here and are not tested.

Each build job records its variant's tree digest as output `d<slot>` (a job output, which only
that job can set); the upload job checks every downloaded artifact against it.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from packaging.version import Version

from ..core import manifest as manifest_mod
from ..core.backend import Backend
from ..core.errors import BuildError
from ..core.toolconfig import IMAGE_HINT
from ..core.layout import MANIFEST, PIXI_TOML
from ..core.manifest import Manifest
from ..core.variant import Variant
from .jobs import Job, env_variant, plan_jobs
from .matrix import EnvSpec, Matrix

Mode = Literal["pr", "release"]
MODES = ("pr", "release")
RUNNERS = {"linux-64": "ubuntu-24.04", "linux-aarch64": "ubuntu-24.04-arm"}
ARCH = {"linux-64": "x86_64", "linux-aarch64": "aarch64"}
# The newest patch release of each CUDA 12 toolkit on Docker Hub (nvidia/cuda:<X.Y.Z>-devel-…),
# an exact tag; pixi.toml's [tool.kbuild.ci.containers] pins one by digest instead.
CUDA_PATCH = {"12.6": "12.6.3", "12.8": "12.8.1", "12.9": "12.9.1"}
CONTAINERS_KEY = "tool.kbuild.ci.containers"
PINNED_IMAGE = re.compile(r"[a-z0-9][a-z0-9._/-]*(:[\w][\w.-]{0,127})?@sha256:[0-9a-f]{64}")
# GitHub runs at most 256 jobs of one matrix; each build job has its own digest output.
MAX_JOBS = 256
CONCURRENCY_KEYS = ("max-jobs", "cores")


@dataclass(frozen=True)
class CiJob:
    """One build job (a row of the build matrix)."""
    env: str        # "" for a noarch variant: it needs no environment
    variant: str
    backend: str
    platform: str
    runner: str
    container: str  # "" (the runner itself) or a CUDA devel image for a toolkit PyPI lacks
    cuda: str       # "" for CPU
    slot: int = 0   # its digest output: d<slot>
    max_jobs: int | None = None  # build-concurrency.json's limits, when it sets them
    cores: int | None = None


@dataclass(frozen=True)
class TestJob:
    """One test job: a built variant where it can run, with `kbuild test --ci`."""
    env: str
    variant: str
    backend: str
    platform: str
    runner: str
    gpu: bool       # on the self-hosted GPU runner


@dataclass(frozen=True)
class UploadTarget:
    repo_id: str      # --repo-id, or "" with create_pr: build.toml's repo-id, by pull request
    create_pr: bool
    also_main: bool   # version 1 with no branch of its own: a second upload to `main`


@dataclass
class CiPlan:
    mode: str
    builds: list[CiJob]
    tests: list[TestJob]
    upload: UploadTarget | None
    torch: str                  # the exact torch the upload job installs (CPU)
    notes: list[str] = field(default_factory=list)

    def outputs(self) -> dict[str, str]:
        """The step outputs the workflows read (`key=value` lines for $GITHUB_OUTPUT)."""
        def rows(items) -> str:
            return json.dumps([asdict(i) for i in items], separators=(",", ":"))
        up = self.upload or UploadTarget("", False, False)
        return {"builds": rows(self.builds),
                "tests": rows(t for t in self.tests if not t.gpu),
                "gpu_tests": rows(t for t in self.tests if t.gpu),
                "repo_id": up.repo_id, "create_pr": str(up.create_pr).lower(),
                "upload_main": str(up.also_main).lower(), "torch": self.torch}


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise BuildError(f"--ci {mode!r}: expected pr or release", key="--ci",
                         hint="pr: one environment per backend; release: every environment")
    return mode


def containers(mx: Matrix) -> dict[str, str]:
    """pixi.toml's `[tool.kbuild.ci.containers]`: CUDA version → image pinned by digest."""
    table = mx.tool.ci.containers  # a table of strings (core/toolconfig.py)
    if mx.default or not table:
        return {}
    for cuda, image in table.items():
        if not PINNED_IMAGE.fullmatch(image):
            raise BuildError(f"{image!r} is not an image pinned by digest", file=mx.path,
                             key=f"{CONTAINERS_KEY}.{cuda}", hint=IMAGE_HINT)
    return dict(table)


def container(spec: EnvSpec, pinned: dict[str, str] | None = None) -> str:
    if spec.cuda is None or spec.toolkit_wheels:
        return ""
    if pinned and spec.cuda in pinned:
        return pinned[spec.cuda]
    patch = CUDA_PATCH.get(spec.cuda, f"{spec.cuda}.0")
    return f"nvidia/cuda:{patch}-devel-ubuntu24.04"


def _pr_rank(spec: EnvSpec) -> tuple[bool, Version, Version]:
    return (spec.cuda is None or bool(spec.toolkit_wheels), Version(spec.torch_version),
            Version(spec.cuda or "0"))


def _best(specs: list[EnvSpec], backend: str) -> EnvSpec | None:
    """The environment a pull request builds (and a noarch variant is tested) for `backend`."""
    return max((s for s in specs if s.backend == backend), key=_pr_rank, default=None)


def ci_jobs(project: Path, specs: list[EnvSpec], mode: str,
            pinned: dict[str, str] | None = None,
            backends: tuple[str, ...] = ()) -> list[CiJob]:
    """The build jobs of `mode`, numbered (`slot`) in order."""
    check_mode(mode)
    manifest = manifest_mod.load(project, warn=lambda _: None)
    rows: list[CiJob] = []
    if manifest.is_noarch:  # one per listed backend, whatever the matrix has
        for backend in manifest.general.backends:
            rows.append(CiJob("", Variant.noarch(backend).name, str(backend), "linux-64",
                              RUNNERS["linux-64"], "", ""))
    else:
        jobs, _ = plan_jobs(project, specs)
        if mode == "pr":
            best: dict[str, Job] = {}
            for job in jobs:
                b = job.spec.backend
                if b not in best or _pr_rank(job.spec) > _pr_rank(best[b].spec):
                    best[b] = job
            jobs = list(best.values())
        for job in jobs:
            spec = job.spec
            platforms = [p for p in spec.platforms if p in RUNNERS]
            if mode == "pr":
                platforms = [p for p in platforms if p == "linux-64"][:1] or platforms[:1]
            for platform in platforms:
                variant, _ = env_variant(manifest, spec, project, platform)
                rows.append(CiJob(spec.name, variant or job.variant, spec.backend, platform,
                                  RUNNERS[platform], container(spec, pinned), spec.cuda or ""))
    if backends:
        rows = [r for r in rows if r.backend in backends]
    if len(rows) > MAX_JOBS:
        raise BuildError(f"{len(rows)} build jobs: GitHub runs at most {MAX_JOBS} of one matrix",
                         file=project / PIXI_TOML,
                         hint="build fewer environments (kbuild envs --ci release lists them)")
    return [CiJob(**{**asdict(r), "slot": i}) for i, r in enumerate(rows)]


def test_jobs(builds: list[CiJob], specs: list[EnvSpec], gpu_runner: str,
              gpu_runner_aarch64: str = "") -> tuple[list[TestJob], list[str]]:
    """Where each built variant is tested, and a note on those that are not (one a reason)."""
    tests: list[TestJob] = []
    untested: dict[str, list[str]] = {}
    for job in builds:
        env = job.env or _noarch_env(specs, job.backend)
        if job.backend == Backend.CPU and env:
            tests.append(TestJob(env, job.variant, job.backend, job.platform, job.runner, False))
            continue
        if job.backend == Backend.CUDA and env:
            runner = {"linux-64": gpu_runner, "linux-aarch64": gpu_runner_aarch64}.get(job.platform)
            if runner:
                tests.append(TestJob(env, job.variant, job.backend, job.platform, runner, True))
            else:
                untested.setdefault(f"no GPU runner for {ARCH.get(job.platform, job.platform)} "
                                    "(the variable GPU_RUNNER_AARCH64 names one)", []).append(job.variant)
            continue
        untested.setdefault(f"no {job.backend} runner", []).append(job.variant)
    notes = [f"not tested, {why}: {', '.join(variants)}" for why, variants in untested.items()]
    return tests, notes


def _noarch_env(specs: list[EnvSpec], backend: str) -> str:
    best = _best(specs, backend)
    return best.name if best else ""


def upload_target(manifest: Manifest, kernel: str, repo_prefix: str | None,
                  org: str | None, branch: str | None, where: Path = Path(MANIFEST)) -> UploadTarget:
    """Where a release uploads, as kernels-community's `hub_pr_upload_args.py` decides: with a
    prefix, `<prefix>/<kernel>` — except that the organisation's own prefix opens a pull request
    on a build.toml repo-id outside it (the uploader then targets build.toml's repo-id); without
    one, build.toml's repo-id. Version 1 with no branch of its own also goes to `main`."""
    declared = manifest.general.hub.repo_id
    also_main = manifest.general.version == 1 and manifest.general.hub.branch is None and not branch
    if repo_prefix is None:
        if not declared:
            raise BuildError("no repo-id to upload to", file=where, key="general.hub.repo-id",
                             hint="set [general.hub] repo-id in build.toml")
        return UploadTarget(declared, False, also_main)
    external = bool(repo_prefix == org and declared and not declared.startswith(f"{org}/"))
    return UploadTarget("" if external else f"{repo_prefix}/{kernel}", external, also_main)


def concurrency(file: Path, kernel: str) -> dict[str, dict[str, int]]:
    """build-concurrency.json's limits for `kernel`, by backend ({"cuda": {"max-jobs": 2}})."""
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BuildError(f"{file} not found", hint="pass --concurrency only when it exists") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BuildError(f"not JSON: {e}", file=file) from None
    if not isinstance(data, dict):
        raise BuildError("expected an object of kernels", file=file)
    limits = data.get(kernel, {})
    if not isinstance(limits, dict):
        raise BuildError("expected an object of backends", file=file, key=kernel)
    known = {b.value for b in Backend}
    for backend, values in limits.items():
        where = f"{kernel}.{backend}"
        if backend not in known:
            raise BuildError(f"unknown backend {backend!r}", file=file, key=where,
                             hint=f"one of {', '.join(sorted(known))}")
        if not isinstance(values, dict):
            raise BuildError("expected an object with max-jobs and/or cores", file=file, key=where)
        for key, value in values.items():
            if key not in CONCURRENCY_KEYS:
                raise BuildError(f"unknown key {key!r}", file=file, key=f"{where}.{key}",
                                 hint="max-jobs or cores")
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise BuildError(f"{value!r} is not a positive integer", file=file,
                                 key=f"{where}.{key}")
    return limits


def parse_backends(value: str | None) -> tuple[str, ...]:
    """A comma-separated backend filter (the workflow's `backends` input)."""
    chosen = tuple(b.strip() for b in (value or "").split(",") if b.strip())
    known = {b.value for b in Backend}
    unknown = [b for b in chosen if b not in known]
    if unknown:
        raise BuildError(f"--backends: unknown backend {', '.join(unknown)}", key="--backends",
                         hint=f"comma-separated, from {', '.join(sorted(known))}")
    return chosen


def upload_torch(specs: list[EnvSpec]) -> str:
    """The torch the upload job loads variants with: the newest CPU environment's exact pin."""
    pool = [s for s in specs if s.cuda is None] or list(specs)
    return max((s.torch_version for s in pool), key=Version, default="")


def plan(project: Path, mx: Matrix, mode: str, *, gpu_runner: str, gpu_runner_aarch64: str = "",
         backends: tuple[str, ...] = (), repo_prefix: str | None = None, org: str | None = None,
         branch: str | None = None, concurrency_file: Path | None = None) -> CiPlan:
    check_mode(mode)
    manifest = manifest_mod.load(project, warn=lambda _: None)
    specs = list(mx.envs)
    builds = ci_jobs(project, specs, mode, containers(mx), backends)
    if not builds:
        raise BuildError("no build job: no environment of the matrix builds a backend build.toml "
                         "lists" + (f" (--backends {','.join(backends)})" if backends else ""),
                         file=project / MANIFEST, key="general.backends")
    if concurrency_file is not None:
        limits = concurrency(concurrency_file, project.resolve().name)
        builds = [CiJob(**{**asdict(b), "max_jobs": limits.get(b.backend, {}).get("max-jobs"),
                           "cores": limits.get(b.backend, {}).get("cores")}) for b in builds]
    tests, notes = test_jobs(builds, specs, gpu_runner, gpu_runner_aarch64)
    unbuilt = [str(b) for b in manifest.general.backends
               if (not backends or b in backends) and b not in {j.backend for j in builds}]
    if unbuilt:
        notes.insert(0, f"not built, no environment of the matrix builds {', '.join(unbuilt)} "
                        "(this builder compiles cpu and cuda)")
    upload = (upload_target(manifest, project.resolve().name, repo_prefix, org, branch,
                            project / MANIFEST) if mode == "release" else None)
    return CiPlan(mode, builds, tests, upload, upload_torch(specs), notes)


def as_json(jobs: list[CiJob]) -> list[dict]:
    return [asdict(j) for j in jobs]
