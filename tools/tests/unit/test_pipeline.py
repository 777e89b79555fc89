"""pipeline: which variants a build makes by default, and how CMake and Ninja output become
progress steps (in process; nothing is built)."""

from __future__ import annotations

from kbuild.core import manifest
from kbuild.core.backend import Backend
from kbuild.stages import pipeline
from kbuild_testing import BINDING, TORCH, fake_torch, make_project, plan_of, make_probe_project


def test_default_backend_follows_the_torch(tmp_path):
    m = manifest.load(make_project(tmp_path / "a", TORCH, files=BINDING))
    assert pipeline.default_backends(m, fake_torch(cuda="13.0")) == [Backend.CUDA]
    assert pipeline.default_backends(m, fake_torch()) == [Backend.CPU]
    only_cuda = manifest.load(make_project(tmp_path / "b", TORCH, backends='["cuda"]', files=BINDING))
    assert pipeline.default_backends(only_cuda, fake_torch()) == [Backend.CUDA]  # the one listed


def test_noarch_builds_every_listed_backend(tmp_path):
    m = manifest.load(make_project(tmp_path, "[torch-noarch]\n", backends='["xpu", "cpu", "neuron"]'))
    assert pipeline.default_backends(m, None) == [Backend.XPU, Backend.CPU, Backend.NEURON]


def test_cmake_and_ninja_lines_become_steps(tmp_path):
    project = make_probe_project(tmp_path / "p")
    plan = plan_of(project)
    steps: list[pipeline.Step] = []
    progress = pipeline._compile_progress(plan, steps.append)
    progress("configure", "")
    progress("configure", "-- Configuring done")
    progress("build", "")
    progress("build", f"[1/3] Building CXX object CMakeFiles/x.dir{project}/csrc/k.cpp.o")
    progress("build", "warning: not a ninja line")
    progress("build", "[3/3] Linking CXX shared module _probe_cpu_abc1234.abi3.so")
    assert [(s.stage, s.detail, s.done, s.total) for s in steps] == [
        ("configure", "", None, None), ("compile", "", None, None),
        ("compile", "csrc/k.cpp", 1, 3), ("compile", "linking _probe_cpu_abc1234.abi3.so", 3, 3)]
    assert {s.variant for s in steps} == {plan.name}


def test_the_split_a_build_compiled_with_is_in_its_provenance(tmp_path, monkeypatch):
    """Issue 42: KBUILD_NVCC_SPLIT made a release build split and nothing recorded it. The
    split of the configure (every object's) reaches metadata.json; an unsplit build has none."""
    import json

    from kbuild.stages import compile as compile_mod
    from kbuild_testing import cpu_kernel

    assert compile_mod.configured_split(["-DKB_NVCC_THREADS=2", "-DKB_NVCC_SPLIT=3"]) == 3
    assert compile_mod.configured_split(["-DKB_PCH=ON"]) == 1  # a CPU build: no nvcc
    project = make_probe_project(tmp_path / "p", files={"csrc/k.cpp": ""},
                                 kernels={"k": cpu_kernel(["csrc/k.cpp"])})
    plan = plan_of(project)
    so = tmp_path / f"{plan.kernel_id}.abi3.so"
    so.write_bytes(b"")
    monkeypatch.setattr(pipeline, "verify_build", lambda plan, so: None)
    for parts, recorded in ((3, {"parts": 3}), (1, None)):
        monkeypatch.setattr(pipeline, "compile_variant", lambda *a, **k: compile_mod.Compiled(
            so, [], nvcc_split=parts))
        result = pipeline.build_plan(plan, tmp_path / "build", verify=False)
        meta = json.loads((result.path / "metadata.json").read_text())
        assert meta["provenance"].get("split-compile") == recorded
