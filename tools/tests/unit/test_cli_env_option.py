"""`--env ""` is refused by every command that takes --env (one error, exit 2 through main),
never taken for the default interpreter; before anything is built, realised or tested."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from kbuild.cli import app
from kbuild.core.errors import BuildError


def commands_with_env() -> list[str]:
    group = typer.main.get_command(app)
    return sorted(name for name, cmd in group.commands.items()
                  if any("--env" in p.opts for p in cmd.params))


def test_the_commands_that_take_env():
    assert commands_with_env() == ["build", "dev", "test"]


@pytest.mark.parametrize("command", commands_with_env())
@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_env_is_refused(tmp_path, command, value):
    (tmp_path / "build.toml").write_text('[general]\nname = "x"\n')
    (tmp_path / "tests").mkdir()
    old = Path.cwd()
    os.chdir(tmp_path)
    try:
        result = CliRunner().invoke(app, [command, "--env", value])
    finally:
        os.chdir(old)
    assert isinstance(result.exception, BuildError), result.output
    assert result.exception.message == "--env is empty" and "kbuild envs" in result.exception.hint
    assert sorted(p.name for p in tmp_path.iterdir()) == ["build.toml", "tests"]
