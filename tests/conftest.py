"""Builds the img2gray kernel (no-op when up to date) and loads it through the real `kernels`."""

from pathlib import Path

import pytest
import torch

PROJECT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def variant_dir() -> Path:
    from kbuild.stages import pipeline

    backend = "cuda" if torch.cuda.is_available() else "cpu"
    (result,) = pipeline.build(PROJECT, backends=[backend])
    return result.path


@pytest.fixture(scope="session")
def kernel(variant_dir):
    import kernels

    backend = "cuda" if torch.cuda.is_available() else "cpu"
    return kernels.get_local_kernel(PROJECT, backend=backend)


@pytest.fixture(scope="session")
def device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"
