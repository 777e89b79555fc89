"""A build killed at any point (SIGINT, SIGKILL) leaves a complete variant in build/ or none."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kbuild_testing import copy_project
from kbuild import pipeline
from kbuild.check import check_variant



def default_sigint() -> None:
    """Children of a background shell start with SIGINT ignored; tests need the default."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_build(project: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "kbuild", "build", str(project), "--backend", "cpu"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True,
                            preexec_fn=default_sigint)


def compiler_pids(project: Path) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(project) in cmd and ("cc1plus" in cmd or " -c " in cmd):
            pids.append(int(proc.name))
    return pids


def wait_for(predicate, timeout=120.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def variants_complete_or_absent(build: Path) -> list[str]:
    if not build.exists():
        return []
    names = sorted(p.name for p in build.iterdir())
    for name in names:
        report = check_variant(build / name, load=False)
        assert report.ok, (name, report.problems)
    return names


@pytest.mark.parametrize("how", ["sigint-builder", "sigkill-builder", "sigkill-compiler"])
def test_killed_build_leaves_no_partial_variant(tmp_path, how):
    project = copy_project(tmp_path / "p")
    proc = start_build(project)
    assert wait_for(lambda: compiler_pids(project)), "the compiler never started"
    if how == "sigkill-compiler":
        for pid in compiler_pids(project):
            os.kill(pid, signal.SIGKILL)
    else:
        os.killpg(proc.pid, signal.SIGINT if how == "sigint-builder" else signal.SIGKILL)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert "Traceback" not in stderr
    assert variants_complete_or_absent(project / "build") == []
    # A later build completes normally from whatever was left.
    (result,) = pipeline.build(project, backends=["cpu"])
    assert variants_complete_or_absent(project / "build") == [result.variant]


def test_killed_rebuild_keeps_the_previous_variant(tmp_path):
    project = copy_project(tmp_path / "p")
    (first,) = pipeline.build(project, backends=["cpu"])
    before = (first.path / "metadata.json").read_bytes()
    binding = project / "torch-ext" / "torch_binding.cpp"
    binding.write_text(binding.read_text() + "\n// changed\n")
    proc = start_build(project)
    assert wait_for(lambda: compiler_pids(project))
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert variants_complete_or_absent(project / "build") == [first.variant]
    assert (first.path / "metadata.json").read_bytes() == before


def test_interrupt_during_install_window(tmp_path, monkeypatch):
    """Even a failure between staging and the final rename leaves no partial variant."""
    project = copy_project(tmp_path / "p")
    import kbuild.pipeline as pl

    def boom(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(pl, "install", boom)
    with pytest.raises(KeyboardInterrupt):
        pipeline.build(project, backends=["cpu"])
    assert variants_complete_or_absent(project / "build") == []
    assert not list((project / ".kbuild" / "staging").iterdir())
