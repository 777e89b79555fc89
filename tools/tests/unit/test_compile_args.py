"""compile: the CMake configure command of a plan (compilers, the compiler cache, CUDA's probe
architecture), and the compiler cache's choice. Nothing is run."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kbuild.core.errors import BuildError
from kbuild.stages import compile as comp
from kbuild_testing import fake_toolkit, make_probe_project, plan_of


@pytest.fixture
def plan(tmp_path):
    return plan_of(make_probe_project(tmp_path / "p"))


def flags(args: list[str]) -> dict[str, str]:
    return dict(a[2:].split("=", 1) for a in args if a.startswith("-D"))


def test_cpu_plan_configures_ninja_with_the_host_compiler_only(plan, tmp_path, monkeypatch):
    monkeypatch.setenv("KBUILD_COMPILER_CACHE", "none")
    args = comp.configure_args(plan, tmp_path / "src", tmp_path / "b")
    assert args[1:7] == ["-S", str(tmp_path / "src"), "-B", str(tmp_path / "b"), "-G", "Ninja"]
    d = flags(args)
    assert d["CMAKE_BUILD_TYPE"] == "Release" and d["CMAKE_CXX_COMPILER_FORCED"] == "ON"
    assert Path(d["CMAKE_CXX_COMPILER"]).is_file() and Path(d["CMAKE_MAKE_PROGRAM"]).name == "ninja"
    assert not [k for k in d if "CUDA" in k or "LAUNCHER" in k]


def test_cuda_plan_names_nvcc_and_probes_with_the_first_kernel_arch(plan, tmp_path, monkeypatch):
    monkeypatch.setenv("KBUILD_COMPILER_CACHE", "none")
    toolkit = fake_toolkit("13.0", ["8.0", "9.0"])
    cuda = dataclasses.replace(plan, cuda=toolkit, kernel_archs={"k": ["8.9+PTX", "9.0"]})
    d = flags(comp.configure_args(cuda, tmp_path / "src", tmp_path / "b"))
    assert d["CMAKE_CUDA_COMPILER"] == str(toolkit.nvcc)
    assert d["CMAKE_CUDA_ARCHITECTURES"] == "89-real" and d["CMAKE_CUDA_COMPILER_FORCED"] == "ON"
    assert d["CMAKE_CUDA_HOST_COMPILER"] == d["CMAKE_CXX_COMPILER"]
    no_kernels = dataclasses.replace(cuda, kernel_archs={})
    assert flags(comp.configure_args(no_kernels, tmp_path, tmp_path))["CMAKE_CUDA_ARCHITECTURES"] == "75-real"


def test_a_compiler_cache_launches_host_and_cuda_compiles(plan, tmp_path, monkeypatch):
    cache = tmp_path / "bin" / "mycache"
    cache.parent.mkdir()
    cache.write_text("")
    monkeypatch.setenv("KBUILD_COMPILER_CACHE", str(cache))
    cuda = dataclasses.replace(plan, cuda=fake_toolkit("13.0", ["8.0"]), kernel_archs={"k": ["8.0"]})
    d = flags(comp.configure_args(cuda, tmp_path, tmp_path))
    assert d["CMAKE_CXX_COMPILER_LAUNCHER"] == d["CMAKE_CUDA_COMPILER_LAUNCHER"] == str(cache)


def test_compiler_cache_choice(tmp_path, monkeypatch):
    monkeypatch.setenv("KBUILD_COMPILER_CACHE", "none")
    assert comp.compiler_launcher() is None
    for absent in (str(tmp_path / "absent"), "no-such-cache"):  # named: never silently without it
        monkeypatch.setenv("KBUILD_COMPILER_CACHE", absent)
        with pytest.raises(BuildError, match=f"KBUILD_COMPILER_CACHE={absent}: no such program") as e:
            comp.compiler_launcher()
        assert "KBUILD_COMPILER_CACHE=none" in e.value.hint
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(comp.sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("KBUILD_COMPILER_CACHE", "auto")
    assert comp.compiler_launcher() is None
    (tmp_path / "sccache").write_text("")
    assert comp.compiler_launcher() == str(tmp_path / "sccache")
    (tmp_path / "ccache").write_text("")
    assert comp.compiler_launcher() == str(tmp_path / "ccache")  # ccache first when both are there
