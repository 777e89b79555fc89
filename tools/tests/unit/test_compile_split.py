"""How a build splits the machine between Ninja jobs and nvcc threads (in process)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kbuild.core.errors import BuildError
from kbuild.stages.compile import NVCC_THREADS_VAR, split

TEN = ["7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "11.0", "12.0", "12.1+PTX"]


def plan(cu_files: int, archs: list[str], kernels: int = 1):
    ks = {f"k{i}": SimpleNamespace(backend="cuda", src=[f"k{i}_{j}.cu" for j in range(cu_files)])
          for i in range(kernels)}
    return SimpleNamespace(kernels=ks, kernel_archs={n: archs for n in ks})


def test_one_file_with_ten_capabilities_uses_ten_cores(monkeypatch):
    monkeypatch.delenv(NVCC_THREADS_VAR, raising=False)
    s = split(plan(1, TEN), cores=16, memory_gib=120)
    assert (s.nvcc_threads, s.nvcc_jobs, s.jobs) == (10, 1, 16)
    assert "16 jobs, nvcc 1 at a time × 10 threads (16 cores" in str(s)


def test_the_binding_compiles_beside_nvcc_on_two_cores(monkeypatch):
    monkeypatch.delenv(NVCC_THREADS_VAR, raising=False)
    s = split(plan(1, TEN), cores=2, memory_gib=20)
    assert (s.nvcc_threads, s.nvcc_jobs, s.jobs) == (2, 1, 2)


def test_two_cuda_files_run_side_by_side(monkeypatch):
    monkeypatch.delenv(NVCC_THREADS_VAR, raising=False)
    s = split(plan(2, TEN), cores=16, memory_gib=120)
    assert (s.nvcc_threads, s.nvcc_jobs, s.jobs) == (8, 2, 16)


def test_many_files_use_one_thread_each(monkeypatch):
    monkeypatch.delenv(NVCC_THREADS_VAR, raising=False)
    s = split(plan(12, TEN, kernels=2), cores=16, memory_gib=120)
    assert (s.nvcc_threads, s.nvcc_jobs, s.jobs) == (1, 16, 16)


def test_threads_never_exceed_the_capabilities(monkeypatch):
    monkeypatch.delenv(NVCC_THREADS_VAR, raising=False)
    assert split(plan(1, ["9.0"]), cores=16, memory_gib=120).nvcc_threads == 1
    assert split(plan(2, TEN), cores=16, memory_gib=120).nvcc_threads == 8


def test_memory_caps_the_jobs(monkeypatch):
    monkeypatch.delenv(NVCC_THREADS_VAR, raising=False)
    s = split(plan(12, TEN), cores=16, memory_gib=6)
    assert (s.nvcc_threads, s.nvcc_jobs, s.jobs) == (1, 4, 4)  # 6 GiB / 1.5 GiB per nvcc


def test_overrides(monkeypatch):
    monkeypatch.setenv(NVCC_THREADS_VAR, "3")
    s = split(plan(1, TEN), 5, cores=16, memory_gib=120)
    assert (s.nvcc_threads, s.nvcc_jobs, s.jobs) == (3, 1, 5)
    monkeypatch.setenv(NVCC_THREADS_VAR, "many")
    with pytest.raises(BuildError, match=NVCC_THREADS_VAR):
        split(plan(1, TEN), cores=16, memory_gib=120)


def test_cpu_builds_have_no_nvcc(monkeypatch):
    monkeypatch.delenv(NVCC_THREADS_VAR, raising=False)
    cpu = SimpleNamespace(kernels={"c": SimpleNamespace(backend="cpu", src=["c.cpp"])},
                          kernel_archs={})
    s = split(cpu, cores=2, memory_gib=20)
    assert (s.jobs, s.nvcc_threads, s.cuda_files) == (2, 1, 0) and "nvcc" not in str(s)
