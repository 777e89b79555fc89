"""Builds the activation kernel once per session into a temp dir and loads it with `kernels`."""

from pathlib import Path

import pytest
import torch

PROJECT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def activation_repo(tmp_path_factory) -> Path:
    """A repo dir holding `build/<variant>` for this torch (cuda variant on a CUDA torch)."""
    from kbuild.stages.pipeline import build

    root = tmp_path_factory.mktemp("activation-repo")
    build(PROJECT, build_dir=root / "build")
    return root


@pytest.fixture(scope="session")
def activation(activation_repo):
    from kernels import get_local_kernel

    backend = "cuda" if torch.cuda.is_available() else "cpu"
    return get_local_kernel(activation_repo, backend=backend)
