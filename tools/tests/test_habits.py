"""kernel-builder users' habits end to end: a clone of a committed project builds clean (what
builds write is no dirty input, and a compile_commands.json the builder did not write is left
alone), and `build -L --cores N` streams the compilers' own output within N cores."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import torch

from kbuild_testing import copy_project, kbuild
from kbuild.stages import pipeline

CPU_VARIANT = (f"torch{torch.__version__.split('.')[0]}{torch.__version__.split('.')[1]}"
               "-cxx11-cpu-x86_64-linux")


def _git(project: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    return subprocess.run(["git", "-C", str(project), *args], check=True, capture_output=True,
                          text=True, env=env).stdout.strip()


def build_cpu(project: Path, said: list[str] | None = None):
    (result,) = pipeline.build(project, backends=["cpu"],
                               note=said.append if said is not None else None)
    return result


def test_a_clone_of_a_committed_build_builds_clean_twice_and_user_files_survive(work):
    """The examples' case: a project whose compile_commands.json was committed with the paths of
    the machine that built it. A clone elsewhere builds `_dirty`-free, twice; neither the
    committed file nor a link the user puts there is replaced."""
    origin = copy_project(work / "origin")
    (origin / ".gitignore").write_text("build/\n.kbuild/\n")  # compile_commands.json not ignored
    _git(origin, "init", "-q")
    build_cpu(origin)
    assert (origin / "compile_commands.json").is_file()
    _git(origin, "add", "-A")
    _git(origin, "commit", "-q", "-m", "kernel, and the editor file by mistake")
    clone = work / "clone"
    subprocess.run(["git", "clone", "-q", str(origin), str(clone)], check=True)
    committed = (clone / "compile_commands.json").read_bytes()
    said: list[str] = []
    first, second = build_cpu(clone, said), build_cpu(clone, said)
    tree = _git(clone, "rev-parse", "HEAD^{tree}")[:7]
    assert first.kernel_id == second.kernel_id == f"_img2gray_cpu_{tree}"
    assert _git(clone, "status", "--porcelain") == ""
    assert (clone / "compile_commands.json").read_bytes() == committed
    assert len(said) == 2 and all("not one kbuild wrote" in s for s in said)
    # The user's own link (to another checkout's file) stays a link; its target is untouched.
    (clone / "compile_commands.json").unlink()
    (clone / "compile_commands.json").symlink_to(origin / "compile_commands.json")
    before = (origin / "compile_commands.json").read_bytes()
    assert not build_cpu(clone).kernel_id.endswith("_dirty")
    assert (clone / "compile_commands.json").is_symlink()
    assert (origin / "compile_commands.json").read_bytes() == before


def test_print_build_logs_streams_the_compilers_output_within_the_cores_given(work):
    project = copy_project(work / "img2gray")
    source = project / "csrc" / "img2gray_cpu.cpp"
    source.write_text(source.read_text() + '\n#warning "kbuild-L-probe"\n')
    quiet = kbuild("build", project, "--backend", "cpu")
    assert quiet.returncode == 0, quiet.stderr
    assert "kbuild-L-probe" not in quiet.stderr  # summarised
    log = project / ".kbuild" / CPU_VARIANT / "build.log"
    assert "kbuild-L-probe" in log.read_text()  # kept in the log
    os.utime(source)  # compile it again (a compiler cache replays its output)
    loud = kbuild("build", project, "-L", "--cores", "1", "--max-jobs", "1")
    assert loud.returncode == 0, loud.stderr
    streamed = [line for line in loud.stderr.splitlines() if line.startswith(f"{CPU_VARIANT}> ")]
    assert any('warning: #warning "kbuild-L-probe"' in line for line in streamed), loud.stderr
    assert any("img2gray_cpu.cpp" in line and line.split("> ", 1)[1].startswith("[")
               for line in streamed)  # Ninja's own step lines
    assert "1 jobs (1 cores" in loud.stderr  # the budget the compile was given …
    assert "--parallel 1\n" in log.read_text()  # … and Ninja's
