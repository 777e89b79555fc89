"""The project runner's check column: a local build's mark alone is `ok (local build)`, any other
problem or a failed check is FAILED (tests/compat/run_projects.py)."""

from __future__ import annotations

import importlib.util
import json
import sys
from argparse import Namespace
from pathlib import Path

import pytest

from kbuild_testing import REPO

spec = importlib.util.spec_from_file_location("run_projects", REPO / "tests" / "compat" / "run_projects.py")
run_projects = importlib.util.module_from_spec(spec)
sys.modules.setdefault("run_projects", run_projects)  # its dataclasses look their module up
spec.loader.exec_module(run_projects)


@pytest.mark.parametrize("codes, exit_code, expected", [
    ({"a": []}, 0, "ok"),
    ({"a": ["metadata.local-build"], "b": []}, 0, "ok (local build)"),
    ({"a": ["metadata.local-build", "load.failed"]}, 0, "FAILED"),
    ({"a": ["metadata.local-build"]}, 1, "FAILED"),
])
def test_check_column(codes, exit_code, expected, tmp_path, monkeypatch):
    log = tmp_path / "p.log"
    log.with_suffix(".check.json").write_text('{"old": ["load.failed"]}')  # an earlier run's

    def fake_run(cmd, log_path: Path, **_):
        Path(cmd[-1]).write_text(json.dumps(codes))
        return exit_code
    monkeypatch.setattr(run_projects, "run", fake_run)
    res = run_projects.Result(project="p")
    run_projects.check(tmp_path, res, Namespace(env=None), log)
    assert res.check == expected
