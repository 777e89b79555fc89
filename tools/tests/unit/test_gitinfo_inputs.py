"""gitinfo: an input file git does not track makes the build dirty; files that are no input
(ignored or not) do not; a non-git project's inputs must stay inside it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from kbuild_testing import copy_project
from kbuild.stages.plan import input_files
from kbuild.core import gitinfo
from kbuild.core import manifest as manifest_mod
from kbuild.core.errors import BuildError


def _git(project: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    return subprocess.run(["git", "-C", str(project), *args], check=True, capture_output=True,
                          text=True, env=env).stdout.strip()


def uid(project: Path) -> tuple[str, gitinfo.GitState | None]:
    manifest = manifest_mod.load(project, warn=lambda _: None)
    return gitinfo.build_uid(project, input_files(project, manifest))


@pytest.fixture
def repo(tmp_path) -> Path:
    project = copy_project(tmp_path / "img2gray")
    (project / ".gitignore").write_text("build/\n*.bin\n")
    _git(project, "init", "-q")
    _git(project, "add", "-A")
    _git(project, "commit", "-q", "-m", "kernel")
    return project


def test_clean_commit(repo):
    built, state = uid(repo)
    assert state is not None and not state.dirty
    assert built == _git(repo, "rev-parse", "HEAD^{tree}")[:7]


def test_untracked_input_makes_the_build_dirty(repo):
    clean, _ = uid(repo)
    (repo / "torch-ext" / "img2gray" / "extra.py").write_text("SHIPPED = True\n")
    built, state = uid(repo)
    assert state is not None and state.dirty and built == clean + "_dirty"
    _git(repo, "add", "torch-ext")  # staged, not committed: still not the commit's build
    assert uid(repo)[1].dirty
    _git(repo, "commit", "-q", "-m", "extra")
    assert not uid(repo)[1].dirty


def test_ignored_input_is_dirty_but_files_that_are_no_input_are_not(repo):
    (repo / "build").mkdir()
    (repo / "build" / "stale.txt").write_text("x")  # ignored, no input
    (repo / "notes.txt").write_text("x")  # untracked, no input
    cache = repo / "torch-ext" / "img2gray" / "__pycache__"
    cache.mkdir()
    (cache / "x.cpython-311.pyc").write_bytes(b"x")  # untracked, never shipped
    assert not uid(repo)[1].dirty
    (repo / "torch-ext" / "img2gray" / "weights.bin").write_bytes(b"x")  # ignored, but shipped
    assert uid(repo)[1].dirty


def test_input_outside_a_non_git_project_is_a_clean_error(tmp_path):
    project = copy_project(tmp_path / "img2gray")
    outside = tmp_path / "secret.py"
    outside.write_text("SECRET = 1\n")
    (project / "torch-ext" / "img2gray" / "linked.py").symlink_to(outside)
    with pytest.raises(BuildError, match="linked.py is a link to a file outside the project"):
        uid(project)  # refused when the inputs are listed (plan.input_files)
    resolved = [p.resolve() for p in (project / "build.toml", outside)]
    with pytest.raises(BuildError, match="secret.py is outside the project"):
        gitinfo.build_uid(project, resolved)  # and by the content hash itself


def test_what_builds_write_is_never_a_dirty_input_even_tracked(repo):
    """compile_commands.json, .kbuild/ and build/ committed by a user (their paths are this
    machine's: a build anywhere else rewrites them) do not make the build `_dirty`; a source
    edit still does."""
    nested = repo / "examples" / "other"
    nested.mkdir(parents=True)
    written = [repo / "compile_commands.json", nested / "compile_commands.json",
               repo / ".kbuild" / "x" / "build.log", nested / ".kbuild" / "y",
               repo / "build" / "v" / "metadata.json"]
    for path in written:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("[]\n")
    _git(repo, "add", "-f", *map(str, written))
    _git(repo, "commit", "-q", "-m", "build outputs, committed by mistake")
    clean, state = uid(repo)
    assert not state.dirty
    for path in written:  # what a build elsewhere does to them
        path.write_text('[{"directory": "/another/machine"}]\n')
    assert uid(repo) == (clean, state)
    source = repo / "csrc" / "img2gray_cpu.cpp"
    source.write_text(source.read_text() + "// edited\n")
    assert uid(repo)[0] == clean + "_dirty"
