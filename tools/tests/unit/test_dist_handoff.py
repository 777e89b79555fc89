"""--dist-scheduler travels as a typed field, never through this process's environment: `kbuild
build` gives it to the pipeline (the plan's `dist_scheduler`, read by the compile), and
`build-all` to each build as KBUILD_DIST_SCHEDULER in that build's environment only (a URL may
hold a password: never on a command line). The variable stays a user's setting."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from kbuild.matrix import buildall, matrix, realise
from kbuild.stages import compile as compile_mod, pipeline
from kbuild.stages.compile import dist
from kbuild_testing import REPO, copy_project, invoke, make_probe_project, plan_of

URL = "http://sched.example:10600"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    for var in (dist.SCHEDULER_VAR, "SCCACHE_CONF", "KBUILD_COMPILER_CACHE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv(dist.TOKEN_VAR, "token")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))


def test_build_gives_the_scheduler_to_the_pipeline_not_to_the_environment(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(pipeline, "build", lambda *a, **kw: seen.append(kw["dist_scheduler"]) or [])
    (tmp_path / "build.toml").write_text("")
    assert invoke("build", str(tmp_path), "--dist-scheduler", URL).exit_code == 0
    assert invoke("build", str(tmp_path)).exit_code == 0
    assert seen == [URL, None] and dist.SCHEDULER_VAR not in os.environ


def test_a_bad_scheduler_is_refused_before_anything_is_built(tmp_path, monkeypatch):
    monkeypatch.setattr(pipeline, "build", lambda *a, **kw: pytest.fail("built"))
    (tmp_path / "build.toml").write_text("")
    result = invoke("build", str(tmp_path), "--dist-scheduler", "sched.example:10600")
    assert result.exit_code != 0 and "is not an http:// or https:// URL" in result.exception.message


def test_the_plans_scheduler_picks_sccache_and_is_the_one_used(tmp_path, monkeypatch):
    tools = {name: tmp_path / name for name in ("ccache", "sccache")}
    monkeypatch.setattr(compile_mod, "cache_tool", lambda name: str(tools[name]) if name in tools else None)
    plan = plan_of(make_probe_project(tmp_path / "p"))
    flags = [a for a in compile_mod.configure_args(plan, tmp_path, tmp_path) if "LAUNCHER" in a]
    assert flags == [f"-DCMAKE_CXX_COMPILER_LAUNCHER={tools['ccache']}"]
    remote = dataclasses.replace(plan, dist_scheduler=URL)
    flags = [a for a in compile_mod.configure_args(remote, tmp_path, tmp_path) if "LAUNCHER" in a]
    assert flags == [f"-DCMAKE_CXX_COMPILER_LAUNCHER={tools['sccache']}"]
    assert dist.for_launcher(str(tools["sccache"]), URL).scheduler == URL
    assert dist.for_launcher(str(tools["sccache"])) is None  # nothing configured otherwise


def test_plans_carry_the_scheduler(tmp_path):
    project = make_probe_project(tmp_path / "p")
    assert [p.dist_scheduler for p in pipeline.plans(project, dist_scheduler=URL)] == [URL]
    assert [p.dist_scheduler for p in pipeline.plans(project)] == [None]


class Realiser:
    via = "pypi"

    def build_command(self, real, args):
        return ["kbuild", *args], {}


def test_build_all_hands_the_scheduler_to_each_build_in_its_environment(tmp_path):
    project = copy_project(tmp_path / "p", REPO)
    runner = buildall.Runner(project, matrix.load(project),
                             buildall.Options(via="pypi", dist_scheduler=URL), lambda *a: None)
    runner.realiser = Realiser()
    calls = []
    runner._call = lambda name, cmd, log, env=None, progress=False: calls.append((cmd, env)) or 0
    spec = runner.matrix.select(["torch213-cpu"])[0]
    runner._build(realise.RealisedEnv(spec, "key", "python"), Path(tmp_path / "log"))
    (cmd, env), = calls
    assert env[dist.SCHEDULER_VAR] == URL and URL not in " ".join(cmd)
    assert dist.SCHEDULER_VAR not in os.environ
