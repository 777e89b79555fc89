"""`kbuild init` writes nothing from a value it has not checked (issue 21, item 4): --repo-id
follows the manifest's repo-id rule before anything is written (it lands in build.toml and
CARD.md), and a target that is a symbolic link is refused by its own name. In process."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from kbuild import scaffold as init_cli
from kbuild.core import manifest
from kbuild.core.errors import BuildError
from kbuild_testing import invoke


def init(*args: str, cwd: Path):
    """`kbuild init ARGS --no-git` in `cwd`."""
    return invoke("init", *args, "--no-git", cwd=cwd)


@pytest.mark.parametrize("repo_id", [
    'org/x"\n[general.extra]\nk = "v',      # a quote and a newline: another TOML table
    "a/b\\",                                 # a backslash: the TOML string breaks
    "../../etc/passwd",
    "org/na me", "org/", "/name", "a/b/c", "org/x--y", "org/" + "n" * 97, 'org/x")\nimport os',
])
def test_a_bad_repo_id_is_refused_before_anything_is_written(tmp_path, repo_id):
    result = init("my-kernel", "--repo-id", repo_id, cwd=tmp_path)
    assert isinstance(result.exception, BuildError), result.output
    assert "is not a Hub repo id: expected org/name" in result.exception.message
    assert "\n" not in result.exception.message
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(BuildError):  # the same rule for callers of create()
        init_cli.create(tmp_path / "k", init_cli.InitOptions("k", repo_id, ("cpu",), False), git=False)
    assert list(tmp_path.iterdir()) == []


def test_a_good_repo_id_lands_in_build_toml_and_the_card(tmp_path):
    result = init("my-kernel", "--repo-id", "My-Org/my.kernel_2", "--backends", "cpu", cwd=tmp_path)
    assert result.exit_code == 0, result.output
    project = tmp_path / "my-kernel"
    assert manifest.load(project).general.hub.repo_id == "My-Org/my.kernel_2"
    raw = tomllib.loads((project / "build.toml").read_text())
    assert raw["general"]["hub"] == {"repo-id": "My-Org/my.kernel_2"}
    assert 'get_kernel("My-Org/my.kernel_2", version=1)' in (project / "CARD.md").read_text()


@pytest.mark.parametrize("dangling", [False, True])
def test_a_symlinked_target_is_refused_by_its_name(tmp_path, dangling):
    real = tmp_path / "elsewhere"
    if not dangling:
        real.mkdir()
    link = tmp_path / "my-kernel"
    link.symlink_to(real)
    result = init("my-kernel", cwd=tmp_path)
    assert isinstance(result.exception, BuildError), result.exception
    assert str(link) in result.exception.message and "symbolic link" in result.exception.message
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["my-kernel"] + ([] if dangling else ["elsewhere"]))
    assert dangling or list(real.iterdir()) == []


def test_a_target_under_a_file_is_one_error(tmp_path):
    (tmp_path / "file").write_text("x")
    result = init("file/my-kernel", cwd=tmp_path)
    assert isinstance(result.exception, BuildError), result.exception
    assert "cannot create" in result.exception.message and "my-kernel" in result.exception.message
