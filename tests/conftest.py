"""Builds the img2gray kernel (no-op when up to date) and loads it through the real `kernels`.
torch is imported by the fixtures, not here: a test runner that only schedules tests (pytest-xdist's
controller) loads this file too."""

from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1]


def _backend() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(scope="session")
def variant_dir() -> Path:
    from kbuild.stages import pipeline

    (result,) = pipeline.build(PROJECT, backends=[_backend()])
    return result.path


@pytest.fixture(scope="session")
def kernel(variant_dir):
    import kernels

    return kernels.get_local_kernel(PROJECT, backend=_backend())


@pytest.fixture(scope="session")
def device() -> str:
    return _backend()
