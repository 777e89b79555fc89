"""`kbuild build --cutlass-substitute` turns on the substitution that stages/generate/cutlass reads."""

from __future__ import annotations

import os

from typer.testing import CliRunner

from kbuild.cli import app
from kbuild.stages.generate import cutlass
from kbuild.stages import pipeline


def test_the_flag_turns_substitution_on_and_its_absence_leaves_it_off(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(pipeline, "build", lambda *a, **kw: seen.append(cutlass.substitute_requested()) or [])
    monkeypatch.setenv(cutlass.SUBSTITUTE_VAR, "0")  # restored after the test
    (tmp_path / "build.toml").write_text("")
    assert CliRunner().invoke(app, ["build", str(tmp_path)]).exit_code == 0
    assert CliRunner().invoke(app, ["build", str(tmp_path), "--cutlass-substitute"]).exit_code == 0
    assert seen == [False, True] and os.environ[cutlass.SUBSTITUTE_VAR] == "1"
