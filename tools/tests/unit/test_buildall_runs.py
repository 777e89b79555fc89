"""build-all's runs, in process (issue 42): an environment its interrupt stopped says so, and
when (the line read `torch213-cpu: interrupted: ` with nothing after it); the realiser and the
build are stand-ins that see the interrupt arrive. A variant built split (KBUILD_NVCC_SPLIT) is
not `up to date` for a build without the split."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbuild.core.errors import BuildError
from kbuild.matrix import buildall, matrix, realise
from kbuild_testing import REPO, copy_project


class Realiser:
    via = "pypi"

    def __init__(self, runner, fail: bool = False):
        self.runner, self.fail = runner, fail

    def realise(self, spec, log, call):
        if self.fail:
            self.runner.stop.set()
            raise BuildError("uv was stopped")
        return realise.RealisedEnv(spec, "key", "python")


@pytest.mark.parametrize("when, said", [
    ("before", "stopped by the interrupt before it started"),
    ("environment", "stopped by the interrupt while its environment was being made"),
    ("compiling", "stopped by the interrupt while it compiled"),
])
def test_an_interrupted_environment_says_when(when, said, tmp_path):
    project = copy_project(tmp_path / "p", REPO)
    runner = buildall.Runner(project, matrix.load(project), buildall.Options(via="pypi"),
                             lambda *a: None)
    runner.realiser = Realiser(runner, fail=when == "environment")
    if when == "before":
        runner.stop.set()

    def build(real, log: Path) -> int:
        runner.stop.set()  # Ctrl-C while the compiler runs: its process group ends
        return 130
    runner._build = build
    spec = runner.matrix.select(["torch213-cpu"])[0]
    result = runner.run_one(buildall.Job(spec, spec.variant()))
    assert result.status == "interrupted"
    assert result.message == f"{said}; build/ keeps the {spec.variant()} it had before, if any"


def test_the_split_setting_is_part_of_a_variants_fingerprint(tmp_path, monkeypatch):
    project = copy_project(tmp_path / "p", REPO)
    spec = matrix.load(project).select(["torch213-cpu"])[0]
    job = buildall.Job(spec, spec.variant())
    monkeypatch.delenv("KBUILD_NVCC_SPLIT", raising=False)
    plain = buildall.fingerprint(project, job, "key", "builder")
    monkeypatch.setenv("KBUILD_NVCC_SPLIT", "on")
    assert buildall.fingerprint(project, job, "key", "builder") != plain
