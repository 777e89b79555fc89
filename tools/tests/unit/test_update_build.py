"""`kbuild update-build` edits build.toml in place (only the upgrade's lines change; comments and
layout stay), writes it atomically and never through a link placed at a temporary file's name
(issue 48); `kbuild check` notes an older edition once. In process."""

from __future__ import annotations

import difflib
import os
import stat
from pathlib import Path

import pytest

from kbuild.core.errors import BuildError
from kbuild_testing import invoke
from test_editions_upgrade import EDITION_4


@pytest.fixture
def project(tmp_path) -> Path:
    root = tmp_path / "cc"
    for source in ("torch-ext/torch_binding.cpp", "csrc/cc.cpp", "torch-ext/cc/__init__.py"):
        (root / source).parent.mkdir(parents=True, exist_ok=True)
        (root / source).write_text("")
    (root / "build.toml").write_text(EDITION_4)
    (root / "build.toml").chmod(0o640)
    return root


def diff(before: str, after: str) -> list[str]:
    return [d for d in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="",
                                            n=0) if d[:1] in "+-" and d[:3] not in ("+++", "---")]


def test_only_the_edition_line_is_added_and_the_mode_kept(project):
    result = invoke("update-build", str(project))
    assert result.exit_code == 0, result.output
    text = (project / "build.toml").read_text()
    assert diff(EDITION_4, text) == ["+edition = 5"]
    assert stat.S_IMODE((project / "build.toml").stat().st_mode) == 0o640
    assert "- set `general.edition = 5` (was 4)" in result.output
    assert [p.name for p in project.iterdir() if p.name.startswith(".")] == []
    again = invoke("update-build", str(project))
    assert again.exit_code == 0 and "already edition 5" in again.output


def test_dry_run_prints_the_new_text_and_writes_nothing(project):
    result = invoke("update-build", str(project), "--dry-run")
    assert result.exit_code == 0, result.output
    assert diff(EDITION_4, result.output) == ["+edition = 5"]
    assert (project / "build.toml").read_text() == EDITION_4


def test_a_link_at_the_old_temporary_name_is_not_followed(project, tmp_path):
    """The file used to go through `.build.toml.tmp`: a link placed there wrote anywhere."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (project / ".build.toml.tmp").symlink_to(victim)
    result = invoke("update-build", str(project))
    assert result.exit_code == 0, result.output
    assert victim.read_text() == "precious\n"
    assert (project / ".build.toml.tmp").is_symlink()  # left as it was, not used
    assert not (project / "build.toml").is_symlink()
    assert diff(EDITION_4, (project / "build.toml").read_text()) == ["+edition = 5"]


def test_a_manifest_that_is_a_link_inside_the_project_stays_a_link(project):
    real = project / "manifests" / "build.toml"
    real.parent.mkdir()
    (project / "build.toml").rename(real)
    (project / "build.toml").symlink_to(Path("manifests") / "build.toml")
    assert invoke("update-build", str(project)).exit_code == 0
    assert (project / "build.toml").is_symlink()
    assert diff(EDITION_4, real.read_text()) == ["+edition = 5"]


def test_an_invalid_upgrade_writes_nothing(project):
    broken = EDITION_4.replace('backend   = "cpu"', 'backend   = "fortran"')
    (project / "build.toml").write_text(broken)
    result = invoke("update-build", str(project))
    assert isinstance(result.exception, BuildError) and "kernel.cc.backend" in str(result.exception)
    assert (project / "build.toml").read_text() == broken
    assert [p.name for p in project.iterdir() if p.name.endswith(".tmp")] == []


def test_check_notes_an_older_edition_once(project):
    result = invoke("check", str(project))
    assert isinstance(result.exception, BuildError)  # nothing built yet
    notes = [line for line in result.output.splitlines() if "edition 4" in line]
    assert len(notes) == 1 and notes[0].startswith("note: ") and "warning" not in result.output
    assert "update-build" in notes[0]
    old = Path.cwd()
    os.chdir(project)
    try:
        assert invoke("update-build").exit_code == 0
        assert "edition" not in invoke("check").output
    finally:
        os.chdir(old)
