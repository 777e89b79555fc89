"""`[tool.kbuild]` of pixi.toml has one typed reader (core/toolconfig.py): every command that
reads it (envs, build-all, lock, matrix update, ci-plan, verify) refuses a key of the wrong shape
with one error naming pixi.toml and the key, never a traceback."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from kbuild.core.errors import BuildError
from kbuild.core.toolconfig import KbuildTool, tool_settings
from kbuild_testing import REPO, copy_project, invoke

BAD = [("tool = 5\n", "tool"), ("[tool]\nkbuild = 5\n", "tool.kbuild"),
       ("[tool.kbuild]\npypi = 3\n", "tool.kbuild.pypi"),
       ("[tool.kbuild.pypi]\ntoolkit = 5\n", "tool.kbuild.pypi.toolkit"),
       ("[tool.kbuild.update]\nindex = 3\n", "tool.kbuild.update.index")]
COMMANDS = [("envs", "--no-probe"), ("build-all",), ("matrix", "update", "--dry-run"),
            ("lock", "--check", "--project"), ("ci-plan",), ("verify",)]
MATRIX = """
[workspace]
name = "p"
channels = ["conda-forge"]
platforms = ["linux-64"]

[feature.pt213-cpu.pypi-dependencies]
torch = { version = "==2.13.0", index = "https://download.pytorch.org/whl/cpu" }

[environments]
torch213-cpu = ["pt213-cpu"]
"""


@pytest.fixture
def project(tmp_path) -> Path:
    return copy_project(tmp_path / "p", REPO)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]))
@pytest.mark.parametrize("table, key", BAD)
def test_a_bad_tool_kbuild_key_is_one_error_naming_pixi_toml_and_the_key(project, command,
                                                                           table, key):
    pixi = project / "pixi.toml"
    pixi.write_text(table + MATRIX)
    result = invoke(*command, str(project))
    assert isinstance(result.exception, BuildError), result.output
    assert (result.exception.file, result.exception.key) == (pixi, key)


def test_the_settings_are_typed_with_defaults():
    raw = tomllib.loads('[tool.kbuild.pypi.toolkit]\n"12" = ["w=={cuda}.*"]\n'
                        '[tool.kbuild.pypi.no-toolkit]\n"11" = "why"\n'
                        '[tool.kbuild.signing]\nrepository = "o/n"\n')
    tool = tool_settings(raw, Path("pixi.toml"))
    assert tool.pypi.toolkit == {"12": ["w=={cuda}.*"]} and tool.pypi.no_toolkit == {"11": "why"}
    assert (tool.signing.repository, tool.signing.workflows) == ("o/n", [])
    assert tool.update.index is None and tool.ci.containers == {}
    assert tool_settings({}, Path("pixi.toml")) == KbuildTool()
