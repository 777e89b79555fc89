"""A build killed at any point (SIGINT, SIGKILL) leaves a complete variant in build/ or none."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kbuild_testing import (complete_variants, compiler_pids, copy_project, default_sigint,
                            real_compiles_env, wait_for)
from kbuild.stages import pipeline


def start_build(project: Path) -> subprocess.Popen:
    """A build whose compilers really run (there is something to interrupt)."""
    return subprocess.Popen([sys.executable, "-m", "kbuild", "build", str(project), "--backend", "cpu"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env={**os.environ, **real_compiles_env()},
                            preexec_fn=default_sigint)


@pytest.fixture
def real_compiles(monkeypatch):
    """The next build is configured as the interrupted one was, so it meets what was left: the
    same compiler cache (which the interrupted build bypassed), or none when the run has no
    ccache."""
    if "KBUILD_COMPILER_CACHE" in real_compiles_env():
        monkeypatch.setenv("KBUILD_COMPILER_CACHE", "none")


@pytest.mark.parametrize("how", ["sigint-builder", "sigkill-builder", "sigkill-compiler"])
def test_killed_build_leaves_no_partial_variant(tmp_path, how, real_compiles):
    project = copy_project(tmp_path / "p")
    proc = start_build(project)
    # The binding takes seconds to compile: killing it cannot race with its completion.
    assert wait_for(lambda: compiler_pids(project, "torch_binding")), "the compiler never started"
    if how == "sigkill-compiler":
        for pid in compiler_pids(project, "torch_binding"):
            os.kill(pid, signal.SIGKILL)
    else:
        os.killpg(proc.pid, signal.SIGINT if how == "sigint-builder" else signal.SIGKILL)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert "Traceback" not in stderr
    assert complete_variants(project / "build") == []
    # A later build completes normally from whatever was left.
    (result,) = pipeline.build(project, backends=["cpu"])
    assert complete_variants(project / "build") == [result.variant]


def test_killed_rebuild_keeps_the_previous_variant(tmp_path, real_compiles):
    project = copy_project(tmp_path / "p")
    (first,) = pipeline.build(project, backends=["cpu"])
    before = (first.path / "metadata.json").read_bytes()
    binding = project / "torch-ext" / "torch_binding.cpp"
    binding.write_text(binding.read_text() + "\n// changed\n")
    proc = start_build(project)
    assert wait_for(lambda: compiler_pids(project, "torch_binding"))
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert complete_variants(project / "build") == [first.variant]
    assert (first.path / "metadata.json").read_bytes() == before


def test_interrupt_during_install_window(work, monkeypatch):
    """Even a failure between staging and the final rename leaves no partial variant."""
    project = copy_project(work / "p")
    import kbuild.stages.pipeline as pl

    def boom(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(pl, "install", boom)
    with pytest.raises(KeyboardInterrupt):
        pipeline.build(project, backends=["cpu"])
    assert complete_variants(project / "build") == []
    assert not list((project / ".kbuild" / "staging").iterdir())


def test_sigterm_stops_the_precompiled_header_being_made(tmp_path, real_compiles):
    """SIGTERM (what build-all sends its builds when stopped) unwinds the build: the precompiled
    header it was making beside the compile (in a process group of its own) is stopped and its
    half-written entry removed, not left compiling 256 MB for nobody."""
    project = copy_project(tmp_path / "p")
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o755)
    proc = subprocess.Popen([sys.executable, "-m", "kbuild", "build", str(project), "--backend", "cpu"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **real_compiles_env(), "KBUILD_CACHE_DIR": str(cache)},
                            preexec_fn=default_sigint)
    def making() -> list[int]:  # the header's compiler (the driver or cc1plus), by its output
        return [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
                if str(cache / "pch") in _cmdline(pid) and "torch_pch.h" in _cmdline(pid)]
    assert wait_for(making), "no precompiled header was being made"
    proc.send_signal(signal.SIGTERM)  # the builder alone, as build-all's stop does first
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM and "terminated" in stderr, stderr
    assert "Traceback" not in stderr
    assert wait_for(lambda: not making(), timeout=30), "the header's compiler outlived the build"
    assert [p.name for p in (cache / "pch").iterdir()] == []
    assert complete_variants(project / "build") == []


def test_sigterm_to_the_builder_alone_stops_ninja_and_its_compilers(tmp_path, real_compiles,
                                                                   monkeypatch):
    """SIGTERM to kbuild only (not its process group; CMake does not pass it on): kbuild ends
    the compile's own process group, whose Ninja stops its compilers, and exits once none is
    left; a rebuild started at once waits for that (the variant's lock), never beside them."""
    project = copy_project(tmp_path / "p")
    beside: list[list[int]] = []

    def compile_variant(*args, **kw):  # the rebuild's compile starts: what else compiles here?
        beside.append(compiler_pids(project))
        return real_compile(*args, **kw)
    real_compile = pipeline.compile_variant
    monkeypatch.setattr(pipeline, "compile_variant", compile_variant)
    proc = start_build(project)
    assert wait_for(lambda: compiler_pids(project, "torch_binding")), "the compiler never started"
    proc.send_signal(signal.SIGTERM)
    (result,) = pipeline.build(project, backends=["cpu"])  # at once: it waits for the lock
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM and "terminated" in stderr, stderr
    assert "Traceback" not in stderr
    assert beside == [[]]
    assert complete_variants(project / "build") == [result.variant]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
