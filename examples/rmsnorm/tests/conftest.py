"""Builds the rmsnorm kernel once per session into a temp dir and loads it with `kernels`."""

from pathlib import Path

import pytest
import torch

PROJECT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def rmsnorm_repo(tmp_path_factory) -> Path:
    """A repo dir holding `build/<variant>` for this torch (cuda variant on a CUDA torch)."""
    from kbuild.stages.pipeline import build

    root = tmp_path_factory.mktemp("rmsnorm-repo")
    build(PROJECT, build_dir=root / "build")
    return root


@pytest.fixture(scope="session")
def rmsnorm(rmsnorm_repo):
    from kernels import get_local_kernel

    backend = "cuda" if torch.cuda.is_available() else "cpu"
    return get_local_kernel(rmsnorm_repo, backend=backend)


@pytest.fixture(scope="session")
def rmsnorm_cpu_repo(rmsnorm_repo, tmp_path_factory) -> Path:
    """A repo dir holding the cpu variant: the session's own on a CPU torch; on a CUDA torch,
    whose session build holds only the cuda variant, a cpu build of its own."""
    if not torch.cuda.is_available():
        return rmsnorm_repo
    from kbuild.stages.pipeline import build

    root = tmp_path_factory.mktemp("rmsnorm-cpu-repo")
    build(PROJECT, backends=["cpu"], build_dir=root / "build")
    return root
