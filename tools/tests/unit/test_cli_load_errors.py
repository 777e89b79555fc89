"""The load check after linking (build/loadcheck.py): torch's message out of an aborted load,
the binding file it names, and one probe per new extension."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from kbuild.stages.check import loadcheck
from kbuild.core.errors import BuildError

ABORT = """\
terminate called after throwing an instance of 'c10::Error'
  what():  Inferred operator schema for a C++ kernel function doesn't match the expected function schema.
  operator: _k_cpu_abc1234::k
  expected schema: _k_cpu_abc1234::k(Tensor input) -> ()
    registered at torch-ext/torch_binding.cpp:55
  inferred schema: (Tensor _0, Tensor _1) -> ()
    registered at torch-ext/torch_binding.cpp:55
  reason: The number of arguments is different. 1 vs 2.
Exception raised from checkSchema at /__w/pytorch/aten/src/ATen/core/dispatch/OperatorEntry.cpp:98 (most recent call first):
frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x9d (0x7f in libc10.so)
Fatal Python error: Aborted
"""


def test_registration_error_is_the_c10_message_without_the_backtrace():
    text = loadcheck.registration_error(ABORT)
    assert text.splitlines()[0].startswith("Inferred operator schema for a C++ kernel function")
    assert text.splitlines()[-1] == "  reason: The number of arguments is different. 1 vs 2."
    assert "frame #" not in text and "Fatal Python error" not in text
    assert loadcheck.registration_error("Segmentation fault\n") is None


def test_crash_without_a_cxx_exception_names_the_signal():
    assert loadcheck.crash_summary(-11, "frame #0: x\nboom\n") == \
        "the process crashed (killed by SIGSEGV)\nboom"


def plan_for(project: Path, sources: list[str]):
    manifest = SimpleNamespace(torch=SimpleNamespace(src=sources))
    torch = SimpleNamespace(python="/bin/python-x", lib_dir="/torch/lib", torch_version="2.13.0")
    return SimpleNamespace(project=project, manifest=manifest, torch=torch)


def test_binding_location_prefers_the_registered_at_file(tmp_path):
    (tmp_path / "torch-ext").mkdir()
    (tmp_path / "torch-ext" / "torch_binding.h").write_text("#pragma once\n")
    (tmp_path / "torch-ext" / "torch_binding.cpp").write_text("TORCH_LIBRARY_EXPAND(x, ops) {}\n")
    plan = plan_for(tmp_path, ["torch-ext/torch_binding.h", "torch-ext/torch_binding.cpp"])
    assert loadcheck.binding_location(plan, ABORT) == f"{tmp_path}/torch-ext/torch_binding.cpp:55"
    assert loadcheck.binding_location(plan, "no location") == f"{tmp_path}/torch-ext/torch_binding.cpp"


def test_check_loads_raises_torchs_text_and_probes_each_new_so_once(tmp_path, monkeypatch):
    (tmp_path / "torch-ext").mkdir()
    (tmp_path / "torch-ext" / "torch_binding.cpp").write_text("TORCH_LIBRARY_EXPAND(x, ops) {}\n")
    monkeypatch.setenv("KBUILD_CACHE_DIR", str(tmp_path / "cache"))
    plan = plan_for(tmp_path, ["torch-ext/torch_binding.cpp"])
    so, work = tmp_path / "k.abi3.so", tmp_path / "work"
    work.mkdir()
    so.write_bytes(b"v1")
    calls = []
    answer = {"value": loadcheck.registration_error(ABORT)}
    monkeypatch.setattr(loadcheck, "probe", lambda *a: calls.append(a[:3]) or answer["value"])

    with pytest.raises(BuildError) as e:
        loadcheck.check_loads(plan, so, work)
    assert "The number of arguments is different. 1 vs 2." in e.value.message
    assert e.value.file.endswith("torch-ext/torch_binding.cpp:55")
    assert "schema" in e.value.hint
    assert calls == [(so, "/bin/python-x", "/torch/lib")]

    answer["value"] = None  # fixed: it loads, and is not probed again until the .so changes
    loadcheck.check_loads(plan, so, work)
    loadcheck.check_loads(plan, so, work)
    assert len(calls) == 2
    so.write_bytes(b"v2")
    loadcheck.check_loads(plan, so, work)
    assert len(calls) == 3
