"""ruff over tools/ (kbuild, kbuild_hub, kbuild_bench, the tests) with the rules in
tools/pyproject.toml: no finding. The same configuration flags what it is there to catch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ruff", reason="ruff (the builder's dev extra) is not installed")
TOOLS = Path(__file__).resolve().parents[1]


def ruff(*args: str, cwd: Path = TOOLS) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_tools_have_no_findings():
    proc = ruff(str(TOOLS))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "All checks passed" in proc.stdout


def test_the_rules_catch_unused_names_long_lines_and_a_program_run_past_the_runner(tmp_path):
    bad = tmp_path / "probe.py"
    bad.write_text("import os\nimport subprocess\n\nsubprocess.run(['true'])\nx = '" + "y" * 130 + "'\n")
    proc = ruff("--config", str(TOOLS / "pyproject.toml"), "--output-format", "concise", str(bad),
                cwd=tmp_path)
    codes = {line.split(": ")[1].split(" ")[0] for line in proc.stdout.splitlines()
             if line.startswith("probe.py:")}
    assert proc.returncode == 1 and {"F401", "TID251", "E501"} <= codes, proc.stdout
    assert "run programs through kbuild.core.runner" in proc.stdout
