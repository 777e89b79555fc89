"""Builds the rmsnorm kernel (all noarch variants) once per session and loads it with `kernels`."""

from pathlib import Path

import pytest
import torch

PROJECT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def rmsnorm_repo(tmp_path_factory) -> Path:
    """A repo dir holding build/torch-cpu and build/torch-cuda."""
    from kbuild.build.pipeline import build

    root = tmp_path_factory.mktemp("rmsnorm-repo")
    build(PROJECT, build_dir=root / "build")
    return root


@pytest.fixture(scope="session")
def rmsnorm(rmsnorm_repo):
    from kernels import get_local_kernel

    backend = "cuda" if torch.cuda.is_available() else "cpu"
    return get_local_kernel(rmsnorm_repo, backend=backend)
