"""Fixtures for the builder's tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbuild_testing import copy_project, cuda_env


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return copy_project(tmp_path / "img2gray")


@pytest.fixture(scope="session")
def cuda_python() -> str:
    """Interpreter of the torch214-cu130 environment of pixi.toml, realised from PyPI (cached)."""
    return str(cuda_env().python)
