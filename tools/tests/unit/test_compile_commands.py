"""compile_commands.json for editors: written (atomically) where clangd looks, replaced only
when the builder wrote it (its digest under .kbuild/), never over a user's own file or link;
`kbuild clean` removes only ours. Nothing in the repository is such a file (issue 48, item 6)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbuild.cli import app
from kbuild.core.layout import Layout
from kbuild.stages.compile.compile_commands import export_compile_commands
from kbuild.stages.generate import BUILD_FOLDER

REPO = Path(__file__).resolve().parents[3]


def variant_work(project: Path, name: str, source: str) -> Path:
    """A variant's work folder as CMake leaves it: its own compile_commands.json."""
    work = Layout.of(project).variant_work(name)
    (work / BUILD_FOLDER).mkdir(parents=True)
    (work / BUILD_FOLDER / "compile_commands.json").write_text(json.dumps([{
        "directory": str(work / BUILD_FOLDER), "file": str(project / source),
        "command": f"c++ -O3 -c {project / source}"}]))
    return work


@pytest.fixture
def project(tmp_path) -> Path:
    (tmp_path / "build.toml").write_text("[general]\nname = 'x'\n")
    return tmp_path


def export(project: Path, *works: Path) -> tuple[Path | None, list[str]]:
    said: list[str] = []
    return export_compile_commands(project, list(works), said.append), said


def test_written_then_replaced_while_it_is_ours(project):
    first = variant_work(project, "a", "csrc/a.cpp")
    target, said = export(project, first)
    assert target == project / "compile_commands.json" and said == []
    assert [e["file"] for e in json.loads(target.read_text())] == [str(project / "csrc/a.cpp")]
    second = variant_work(project, "b", "csrc/b.cpp")
    assert export(project, first, second) == (target, [])
    assert len(json.loads(target.read_text())) == 2
    assert [p.name for p in project.iterdir() if p.name.endswith(".tmp")] == []


def test_a_users_own_file_is_left_alone_with_one_note(project):
    own = project / "compile_commands.json"
    own.write_text('[{"directory": "/mine", "file": "x.cpp", "command": "clang x.cpp"}]\n')
    target, said = export(project, variant_work(project, "a", "csrc/a.cpp"))
    assert target is None and own.read_text().startswith('[{"directory": "/mine"')
    assert len(said) == 1 and "not one kbuild wrote" in said[0] and "remove it" in said[0]


def test_a_users_link_is_left_alone_and_its_target_untouched(project, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("other") / "compile_commands.json"
    elsewhere.write_text("[]\n")
    link = project / "compile_commands.json"
    link.symlink_to(elsewhere)
    work = variant_work(project, "a", "csrc/a.cpp")
    assert export(project, work)[0] is None
    assert link.is_symlink() and elsewhere.read_text() == "[]\n"
    # A link to the very file kbuild wrote is still the user's.
    ours = project / "ours.json"
    link.unlink()
    export(project, work)
    (project / "compile_commands.json").rename(ours)
    link.symlink_to(ours)
    assert export(project, work)[0] is None and link.is_symlink()


def test_ours_edited_by_the_user_becomes_theirs(project):
    work = variant_work(project, "a", "csrc/a.cpp")
    target, _ = export(project, work)
    target.write_text(target.read_text().replace("-O3", "-O3 -DMINE"))
    assert export(project, work)[0] is None and "-DMINE" in target.read_text()


def test_an_interruption_between_mark_and_file_keeps_the_file_ours(project):
    work = variant_work(project, "a", "csrc/a.cpp")
    target, _ = export(project, work)
    before = target.read_bytes()
    variant_work(project, "b", "csrc/b.cpp")
    mark = Layout.of(project).compile_commands_mark
    mark.write_text(mark.read_text() + "0" * 64 + "\n")  # the next digest, remembered first
    assert export(project, work)[0] == target  # the old file is still ours
    assert target.read_bytes() == before


def test_a_file_written_before_the_mark_is_recognised(project):
    """What earlier builders wrote (no mark yet): exactly this writer's output, every entry in
    this project's .kbuild/."""
    work = variant_work(project, "a", "csrc/a.cpp")
    target, _ = export(project, work)
    Layout.of(project).compile_commands_mark.unlink()
    assert export(project, work)[0] == target
    Layout.of(project).compile_commands_mark.unlink()
    entries = json.loads(target.read_text())
    entries[0]["directory"] = "/srv/other-checkout/examples/activation/.kbuild/v/cmake-build"  # another checkout's
    target.write_text(json.dumps(entries, indent=1) + "\n")
    assert export(project, work)[0] is None


def test_clean_removes_ours_and_keeps_a_users(project):
    target, _ = export(project, variant_work(project, "a", "csrc/a.cpp"))
    result = CliRunner().invoke(app, ["clean", str(project)])
    assert result.exit_code == 0, result.output
    assert not target.exists() and not (project / ".kbuild").exists()
    target.write_text("[]\n")  # the user's
    assert CliRunner().invoke(app, ["clean", str(project)]).exit_code == 0
    assert target.read_text() == "[]\n"


def test_the_repository_tracks_no_compile_commands_and_ignores_them_everywhere():
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run(["git", "-C", str(REPO), "ls-files", "*compile_commands.json"],
                             capture_output=True, text=True, check=True).stdout.split()
    assert tracked == []
    for path in ("compile_commands.json", "examples/activation/compile_commands.json",
                 "examples/new/deep/compile_commands.json"):
        ignored = subprocess.run(["git", "-C", str(REPO), "check-ignore", "-q", "--no-index",
                                  path])
        assert ignored.returncode == 0, path


def test_the_init_scaffold_ignores_them_everywhere(tmp_path):
    from kbuild.scaffold import TEMPLATES
    (tmp_path / ".gitignore").write_text((TEMPLATES / "gitignore.j2").read_text())
    subprocess.run(["git", "-C", str(tmp_path), "init", "-q"], check=True)
    for path in ("compile_commands.json", "kernels/a/compile_commands.json"):
        assert subprocess.run(["git", "-C", str(tmp_path), "check-ignore", "-q", path]
                              ).returncode == 0, path
