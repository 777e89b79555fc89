"""The workflow linters the tests run: actionlint with shellcheck on every `run:` script, and
zizmor offline. All three come with the test extra (tools/pyproject.toml); a test that needs one
skips, saying so, where it is missing (and fails in CI). actionlint runs shellcheck only if it
finds it: `actionlint()` names it explicitly and proves, on a script with a known finding, that
the findings come through, so a missing shellcheck can never pass as a clean workflow."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# SC2209: `mode=pr` assigns the string, though `pr` is a command (what our workflow once had).
KNOWN_FINDING = """on: push
jobs:
  j:
    runs-on: ubuntu-24.04
    steps:
      - run: |
          mode=pr
          echo "$mode"
"""


def tool(name: str) -> str:
    """The tool next to this interpreter (the test extra's), else on PATH; else skip (fail
    in CI)."""
    found = Path(sys.executable).parent / name
    path = str(found) if found.is_file() else shutil.which(name)
    if path is None:
        why = f"{name} is not installed (pip install -e 'tools[test]' installs it)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return path


def run_actionlint(*files: Path | str) -> subprocess.CompletedProcess:
    return subprocess.run([tool("actionlint"), "-no-color", "-shellcheck", tool("shellcheck"),
                           *map(str, files)], capture_output=True, text=True)


def actionlint(tmp_path: Path, *files: Path | str) -> subprocess.CompletedProcess:
    """actionlint with shellcheck on `files`, after checking that a shellcheck finding is
    reported."""
    canary = tmp_path / "shellcheck-canary.yml"
    canary.write_text(KNOWN_FINDING)
    proc = run_actionlint(canary)
    assert proc.returncode == 1 and "SC2209" in proc.stdout, \
        f"actionlint did not report shellcheck's finding: {proc.stdout}{proc.stderr}"
    return run_actionlint(*files)


def zizmor(*files: Path | str) -> subprocess.CompletedProcess:
    """zizmor's offline audits (no GitHub API), the regular persona."""
    return subprocess.run([tool("zizmor"), "--offline", "--no-progress", "--color=never",
                           *map(str, files)], capture_output=True, text=True,
                          env={**os.environ, "ZIZMOR_OFFLINE": "1"})
