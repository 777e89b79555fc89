"""`kbuild dev` runs the project's tests with pytest's rootdir and configuration pinned to the
project (issue 21, item 8): a parent folder's pytest.ini or conftest.py is not picked up, the
project's own configuration is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kbuild import scaffold as init_cli
from kbuild.stages.devtest import pytest_args, run_tests

PARENT_INI = "[pytest]\naddopts = --no-such-option\n"
PARENT_CONFTEST = "raise RuntimeError('a parent folder conftest was imported')\n"


def project_under_a_hostile_parent(tmp_path: Path) -> Path:
    """A new noarch project, with a trivial test, in a folder whose pytest.ini and conftest.py
    would break any pytest run that found them."""
    (tmp_path / "pytest.ini").write_text(PARENT_INI)
    (tmp_path / "conftest.py").write_text(PARENT_CONFTEST)
    project = tmp_path / "tiny-op"
    init_cli.create(project, init_cli.InitOptions("tiny-op", "org/tiny-op", ("cpu",), True), git=False)
    for path in (project / "tests").iterdir():
        path.unlink()
    (project / "tests" / "test_ok.py").write_text("def test_ok():\n    assert True\n")
    return project


def pytest(project: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", str(project / "tests"), "-q", *args],
                          cwd=project, capture_output=True, text=True, timeout=300)


def test_a_parent_folders_configuration_is_not_picked_up(tmp_path):
    project = project_under_a_hostile_parent(tmp_path)
    assert pytest(project).returncode != 0  # what `kbuild dev` ran into
    proc = pytest(project, *pytest_args(project))
    assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout + proc.stderr
    assert run_tests(project, None, [], write=lambda line: None) == 0  # the runner `kbuild dev` uses


def test_the_projects_own_configuration_is_used(tmp_path):
    project = project_under_a_hostile_parent(tmp_path)
    (project / "tests" / "test_ok.py").rename(project / "tests" / "check_ok.py")
    (project / "pyproject.toml").write_text('[tool.pytest.ini_options]\npython_files = ["check_*.py"]\n')
    assert pytest_args(project)[3] == str(project / "pyproject.toml")
    proc = pytest(project, *pytest_args(project))
    assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout + proc.stderr
    (project / "pyproject.toml").write_text('[project]\nname = "x"\n')  # no pytest table: not a config
    assert pytest_args(project)[3] != str(project / "pyproject.toml")
    (project / "tests" / "pytest.ini").write_text("[pytest]\npython_files = check_*.py\n")
    assert pytest_args(project)[3] == str(project / "tests" / "pytest.ini")
    assert run_tests(project, None, [], write=lambda line: None) == 0
