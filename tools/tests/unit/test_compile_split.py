"""How a build splits the machine between Ninja jobs, nvcc threads and nvcc's split compile
(in process)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kbuild.core.errors import BuildError
from kbuild.stages import compile as compile_mod
from kbuild.stages.compile import NVCC_SPLIT_VAR, NVCC_THREADS_VAR, split

TEN = ["7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "11.0", "12.0", "12.1+PTX"]


def plan(cu_files: int, archs: list[str], kernels: int = 1, local: bool = False):
    ks = {f"k{i}": SimpleNamespace(backend="cuda", src=[f"k{i}_{j}.cu" for j in range(cu_files)])
          for i in range(kernels)}
    return SimpleNamespace(kernels=ks, kernel_archs={n: archs for n in ks},
                           local_capabilities=tuple(archs) if local else None)


@pytest.fixture(autouse=True)
def no_overrides(monkeypatch):
    monkeypatch.delenv(NVCC_THREADS_VAR, raising=False)
    monkeypatch.delenv(NVCC_SPLIT_VAR, raising=False)


def test_one_file_with_ten_capabilities_uses_ten_cores():
    s = split(plan(1, TEN), cores=16, memory_gib=120)
    assert (s.nvcc_threads, s.nvcc_jobs, s.jobs, s.nvcc_split) == (10, 1, 16, 1)
    assert "16 jobs, nvcc 1 at a time × 10 threads (16 cores" in str(s)


def test_the_binding_compiles_beside_nvcc_on_two_cores():
    s = split(plan(1, TEN), cores=2, memory_gib=20)
    assert (s.nvcc_threads, s.nvcc_jobs, s.jobs) == (2, 1, 2)


def test_two_cuda_files_run_side_by_side():
    s = split(plan(2, TEN), cores=16, memory_gib=120)
    assert (s.nvcc_threads, s.nvcc_jobs, s.jobs) == (8, 2, 16)


def test_many_files_use_one_thread_each():
    s = split(plan(12, TEN, kernels=2), cores=16, memory_gib=120)
    assert (s.nvcc_threads, s.nvcc_jobs, s.jobs) == (1, 16, 16)


def test_threads_never_exceed_the_capabilities():
    assert split(plan(1, ["9.0"]), cores=16, memory_gib=120).nvcc_threads == 1
    assert split(plan(2, TEN), cores=16, memory_gib=120).nvcc_threads == 8


def test_memory_caps_the_jobs():
    s = split(plan(12, TEN), cores=16, memory_gib=6)
    assert (s.nvcc_threads, s.nvcc_jobs, s.jobs) == (1, 4, 4)  # 6 GiB / 1.5 GiB per nvcc


def test_overrides(monkeypatch):
    monkeypatch.setenv(NVCC_THREADS_VAR, "3")
    s = split(plan(1, TEN), 5, cores=16, memory_gib=120)
    assert (s.nvcc_threads, s.nvcc_jobs, s.jobs) == (3, 1, 5)
    monkeypatch.setenv(NVCC_THREADS_VAR, "many")
    with pytest.raises(BuildError, match=NVCC_THREADS_VAR):
        split(plan(1, TEN), cores=16, memory_gib=120)


def test_cpu_builds_have_no_nvcc():
    cpu = SimpleNamespace(kernels={"c": SimpleNamespace(backend="cpu", src=["c.cpp"])},
                          kernel_archs={})
    s = split(cpu, cores=2, memory_gib=20)
    assert (s.jobs, s.nvcc_threads, s.cuda_files, s.nvcc_split) == (2, 1, 0, 1)
    assert "nvcc" not in str(s)


# --split-compile: the cores nvcc's threads leave idle go to its device-code optimisation.

def test_one_heavy_file_for_one_capability_splits_over_every_core():
    s = split(plan(1, ["9.0"], local=True), cores=16, memory_gib=120)
    assert (s.nvcc_threads, s.nvcc_jobs, s.nvcc_split, s.jobs) == (1, 1, 16, 16)
    assert "nvcc 1 at a time × 1 threads × split 16 (16 cores" in str(s)
    assert "may run slower: KBUILD_NVCC_SPLIT=1" in str(s)  # local builds are not for timing


def test_an_unsplit_build_does_not_warn_about_kernel_speed(monkeypatch):
    monkeypatch.setenv("KBUILD_NVCC_SPLIT", "1")
    s = split(plan(1, ["9.0"], local=True), cores=16, memory_gib=120)
    assert s.nvcc_split == 1 and "slower" not in str(s) and "split" not in str(s)


def test_threads_take_the_cores_first_then_split_takes_the_rest():
    s = split(plan(1, TEN[:4], local=True), cores=16, memory_gib=120)
    assert (s.nvcc_threads, s.nvcc_split) == (4, 4)


def test_few_files_running_at_once_may_share_the_idle_cores():
    # 4 files on 16 cores: 4 cores each, twice that while all four run at once (the light ones
    # finish early, leaving the heavy ones the cores)
    s = split(plan(4, ["9.0"], local=True), cores=16, memory_gib=120)
    assert (s.nvcc_jobs, s.nvcc_split) == (4, 8)


def test_many_files_no_split():
    s = split(plan(56, ["9.0"], local=True), cores=16, memory_gib=120)
    assert (s.nvcc_jobs, s.nvcc_threads, s.nvcc_split) == (16, 1, 1)
    assert "split" not in str(s)


def test_files_in_waves_get_only_the_exactly_spare_cores():
    s = split(plan(20, ["9.0"], local=True), cores=64, memory_gib=500)
    assert (s.nvcc_jobs, s.nvcc_split) == (20, 6)  # all 20 at once: 64 // 20, doubled
    s = split(plan(40, ["9.0"], local=True), cores=16, memory_gib=500)
    assert (s.nvcc_jobs, s.nvcc_split) == (16, 1)  # in waves: no core is spare


def test_memory_bounds_the_split_workers():
    # 1 nvcc × 1 thread × split ≤ 6 GiB / 1.5 GiB per worker
    s = split(plan(1, ["9.0"], local=True), cores=16, memory_gib=6)
    assert s.nvcc_split == 4
    s = split(plan(4, ["9.0"], local=True), cores=16, memory_gib=12)  # 8 workers: 4 runs × 2
    assert (s.nvcc_jobs, s.nvcc_split) == (4, 2)


def test_jobs_bound_the_split():
    s = split(plan(1, ["9.0"], local=True), 4, cores=16, memory_gib=120)
    assert (s.jobs, s.nvcc_split) == (4, 4)


def test_release_builds_follow_the_policy(monkeypatch):
    release = plan(1, ["9.0"])
    monkeypatch.setattr(compile_mod, "SPLIT_RELEASE_BUILDS", False)
    assert split(release, cores=16, memory_gib=120).nvcc_split == 1
    monkeypatch.setattr(compile_mod, "SPLIT_RELEASE_BUILDS", True)
    assert split(release, cores=16, memory_gib=120).nvcc_split == 16


@pytest.mark.parametrize("value, expected", [("1", 1), ("off", 1), ("OFF", 1), ("no", 1),
                                             ("6", 6), (" 3 ", 3), ("on", 16)])
def test_split_override(monkeypatch, value, expected):
    monkeypatch.setenv(NVCC_SPLIT_VAR, value)
    assert split(plan(1, ["9.0"], local=True), cores=16, memory_gib=120).nvcc_split == expected
    assert split(plan(1, ["9.0"]), cores=16, memory_gib=120).nvcc_split == expected  # release too


# Bad overrides: one message naming the variable, never a traceback; a CPU build ignores them.

@pytest.mark.parametrize("var", [NVCC_THREADS_VAR, NVCC_SPLIT_VAR])
@pytest.mark.parametrize("value", ["²", "٣", "0", "-2", "1.5", "many", "99999999999999999999999"])
def test_bad_counts_are_refused_with_one_message(monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    with pytest.raises(BuildError) as e:
        split(plan(1, TEN), cores=16, memory_gib=120)
    assert var in e.value.message and repr(value) in e.value.message and e.value.hint


@pytest.mark.parametrize("var", [NVCC_THREADS_VAR, NVCC_SPLIT_VAR])
def test_cpu_builds_ignore_the_nvcc_settings(monkeypatch, var):
    monkeypatch.setenv(var, "²")
    cpu = SimpleNamespace(kernels={"c": SimpleNamespace(backend="cpu", src=["c.cpp"])},
                          kernel_archs={})
    assert split(cpu, cores=2, memory_gib=20).jobs == 2


@pytest.mark.parametrize("jobs", [0, -1, -(2**70)])
def test_jobs_must_be_positive(jobs):
    with pytest.raises(BuildError, match="--jobs"):
        split(plan(1, TEN), jobs, cores=16, memory_gib=120)


def test_a_huge_jobs_value_stays_within_the_memory():
    s = split(plan(12, TEN), 2**70, cores=16, memory_gib=6)
    assert (s.jobs, s.nvcc_jobs) == (4, 4)
    cpu = SimpleNamespace(kernels={"c": SimpleNamespace(backend="cpu", src=["c.cpp"])},
                          kernel_archs={})
    assert split(cpu, 10**6, cores=2, memory_gib=3).jobs == 2


def test_with_the_split_on_threads_may_take_twice_their_even_share(monkeypatch):
    # punica-sgmv's release build: 3 CUDA files, 8 capabilities, 16 cores
    release = plan(3, TEN[1:9])
    monkeypatch.setattr(compile_mod, "SPLIT_RELEASE_BUILDS", False)
    s = split(release, cores=16, memory_gib=120)
    assert (s.nvcc_jobs, s.nvcc_threads, s.nvcc_split) == (3, 5, 1)  # as before the split
    monkeypatch.setattr(compile_mod, "SPLIT_RELEASE_BUILDS", True)
    s = split(release, cores=16, memory_gib=120)
    assert (s.nvcc_jobs, s.nvcc_threads, s.nvcc_split) == (3, 8, 1)  # every capability at once
    s = split(plan(2, TEN[:4]), cores=16, memory_gib=120)
    assert (s.nvcc_jobs, s.nvcc_threads, s.nvcc_split) == (2, 4, 4)
