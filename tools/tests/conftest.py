"""Fixtures for the builder's tests."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from kbuild_testing import built_img2gray, copy_project, cuda_env, work_folder


@pytest.fixture
def work(request, tmp_path: Path) -> Path:
    """An empty folder for this test at the same path in every run (builds in it hit the
    compiler cache when the suite runs again); tmp_path when the run has no work folder."""
    return work_folder(request.node.nodeid, tmp_path)


@pytest.fixture
def project(work: Path) -> Path:
    return copy_project(work / "img2gray")


@pytest.fixture(scope="session")
def builds(tmp_path_factory):
    """Built copies of img2gray, made once per run: builds(key, version=, marker=). Read them,
    or change a kbuild_testing.fresh_copy."""
    def get(key: str = "base", **kw) -> Path:
        return built_img2gray(lambda: tmp_path_factory.mktemp(f"build-{key}"), key, **kw)
    return get


@pytest.fixture(scope="session")
def cuda_python() -> str:
    """Interpreter of the torch214-cu130 environment of pixi.toml, realised from PyPI (cached)."""
    return str(cuda_env().python)


class _QuickSleep:
    """The `time` module as huggingface_hub's HTTP retries see it, waiting 10 ms at most."""

    def __getattr__(self, name):
        return getattr(time, name)

    @staticmethod
    def sleep(seconds: float) -> None:
        time.sleep(min(seconds, 0.01))


@pytest.fixture(autouse=True)
def _quick_client_retries(monkeypatch):
    """huggingface_hub waits 1 s, 2 s, ... before it retries a request; the test servers' faults
    are injected, so in-process clients retry after 10 ms (the requests and their order stay)."""
    http = sys.modules.get("huggingface_hub.utils._http")
    if http is not None:
        monkeypatch.setattr(http, "time", _QuickSleep())
