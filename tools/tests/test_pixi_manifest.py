"""pixi.toml (and the default matrix shipped with the builder): valid for pixi 0.77, tasks that
call real commands, pins that agree with names; the CI workflows (checked with actionlint)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from kbuild.matrix import matrix
from kbuild.cli import app
import workflow_lint

REPO = Path(__file__).resolve().parents[2]
PIXI = REPO / "pixi.toml"
SCHEMA = Path(__file__).parent / "data" / "pixi-manifest-schema-v0.77.0.json"
WORKFLOWS = REPO / ".github" / "workflows"
WORKFLOW = WORKFLOWS / "build-variants.yml"
DEFAULT = REPO / "tools" / "kbuild" / "resources" / "matrix" / "pixi.toml"

# torch release -> computes: the older releases kept, and upstream's current set (kernel-builder's
# build variants: 2.11 cu126/cu128/cu130, 2.12-2.13 cu126/cu130/cu132, cpu) extended to 2.14;
# 2.15 as `kbuild matrix update --index https://pypi.org/simple` adds it (PyPI's default wheel).
REQUIRED = {
    "27": ["cu126", "cu128"], "28": ["cu126", "cu128", "cu129", "cpu"],
    "29": ["cu126", "cu128", "cu130", "cpu"], "210": ["cu126", "cu128", "cu130", "cpu"],
    "211": ["cu126", "cu128", "cu130", "cpu"], "212": ["cu126", "cu130", "cu132", "cpu"],
    "213": ["cu126", "cu130", "cu132", "cpu"], "214": ["cu126", "cu130", "cu132", "cpu"],
    "215": ["cu132"],
}


@pytest.fixture(scope="module")
def raw() -> dict:
    return tomllib.loads(PIXI.read_text())


@pytest.fixture(scope="module")
def mx() -> matrix.Matrix:
    return matrix.load(REPO)


@pytest.mark.parametrize("path", [PIXI, DEFAULT], ids=["ours", "default"])
def test_pixi_toml_is_valid_for_pixi_0_77(path):
    import jsonschema

    raw = tomllib.loads(path.read_text())
    schema = json.loads(SCHEMA.read_text())
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(raw), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message[:300]}" for e in errors)
    assert raw["workspace"]["requires-pixi"].startswith(">=0.77")


def command_names() -> set[str]:
    return {c.name or c.callback.__name__.replace("_", "-") for c in app.registered_commands}


def test_every_task_calls_an_existing_command(raw):
    tasks = dict(raw.get("tasks", {}))
    for feature in raw.get("feature", {}).values():
        tasks.update(feature.get("tasks", {}))
    assert {"dev", "build", "build-all", "upload", "test"} <= tasks.keys()
    known = command_names()
    for name, task in tasks.items():
        cmd = task if isinstance(task, str) else task.get("cmd")
        deps = [] if isinstance(task, str) else task.get("depends-on", [])
        for dep in deps if isinstance(deps, list) else [deps]:
            assert (dep if isinstance(dep, str) else dep["task"]) in tasks, (name, dep)
        if cmd is None:
            continue
        argv = shlex.split(cmd if isinstance(cmd, str) else " ".join(cmd))
        if argv[0] == "kbuild":
            assert argv[1] in known, f"task {name!r} runs `kbuild {argv[1]}`, which does not exist"
        else:
            assert argv[0] == "pytest", f"task {name!r} runs {argv[0]!r}, not the kbuild CLI"


def test_dev_and_test_tasks_pass_options_through(raw):
    """`pixi run -e ENV dev --cuda-capabilities native -- -k x` reaches `kbuild dev`: pixi
    appends extra arguments only to tasks that declare none (with `args` it refuses them)."""
    init_tasks = tomllib.loads((REPO / "tools" / "kbuild" / "resources" / "init" /
                                "pixi-tasks.toml").read_text())["tasks"]
    for tasks in (raw["tasks"], init_tasks):
        for name in ("dev", "build", "upload"):
            assert "args" not in tasks[name] and "{{" not in tasks[name]["cmd"], name
            assert tasks[name]["cmd"] == f"kbuild {name}"
    assert init_tasks["test"]["cmd"] == "kbuild test"  # tests the build, never the Hub's copy


def test_every_environment_agrees_with_its_name(mx, raw):
    assert len(mx.envs) >= 20
    problems = [p for env in mx.envs for p in matrix.name_problems(env)]
    assert not problems, problems
    groups = [env.solve_group for env in mx.envs]
    assert None not in groups and len(set(groups)) == len(groups), "one solve-group per environment"
    for env in mx.envs:
        assert set(env.platforms) <= set(mx.platforms), env.name
        assert "linux-64" in env.platforms, env.name
        assert env.python, f"{env.name}: python is not pinned"
        assert env.torch_index, f"{env.name}: torch must come from a PyTorch wheel index"
        toolkit = [f for f in env.features if f.startswith("cuda")]
        if env.cuda is None:
            assert not toolkit, f"{env.name}: a CPU environment has a toolkit"
            continue
        assert len(toolkit) == 1, env.name
        feature = raw["feature"][toolkit[0]]
        assert set(matrix.TOOLKIT_PACKAGES) <= feature["dependencies"].keys(), toolkit[0]
        assert feature["activation"]["env"]["CUDA_HOME"] == "$CONDA_PREFIX"


def test_matrix_covers_the_required_combinations(mx):
    names = {env.name for env in mx.envs}
    missing = [f"torch{t}-{c}" for t, computes in REQUIRED.items() for c in computes
               if f"torch{t}-{c}" not in names]
    assert not missing, missing
    assert "linux-aarch64" in mx.platforms


def test_matrix_is_the_only_definition(mx):
    """The PyPI path reads the same pins: requirement strings come from pixi.toml."""
    env = mx.get("torch27-cu126")
    assert env.torch_version == "2.7.1" and env.cuda == "12.6"
    assert env.torch_requirement == "torch===2.7.1"
    assert env.torch_index_requirement() == "torch==2.7.1+cu126"
    assert mx.get("torch213-cpu").torch_requirement == "torch==2.13.0+cpu"
    assert "kernels==0.17.2" in env.pypi_extra
    assert not any("pixi-kernel-builder" in r for r in env.pypi_extra)  # path deps stay with pixi
    assert mx.get("torch214-cu130").toolkit_wheels
    assert mx.get("torch27-cu126").no_toolkit_reason


@pytest.mark.parametrize("name, platform, variant", [
    ("torch27-cu126", "linux-64", "torch27-cxx11-cu126-x86_64-linux"),
    ("torch213-cpu", "linux-64", "torch213-cxx11-cpu-x86_64-linux"),
    ("torch214-cu130", "linux-aarch64", "torch214-cxx11-cu130-aarch64-linux"),
    ("torch210-cu128", "linux-64", "torch210-cxx11-cu128-x86_64-linux"),
])
def test_variant_names(mx, name, platform, variant):
    assert mx.get(name).variant(platform) == variant


def test_selection(mx):
    assert [e.name for e in mx.select(["torch214-*"])] == ["torch214-cu126", "torch214-cu130",
                                                           "torch214-cu132", "torch214-cpu"]
    assert [e.name for e in mx.select(["torch21?-cu130"], ["torch210*,torch211*"])] == [
        "torch212-cu130", "torch213-cu130", "torch214-cu130"]
    assert [e.name for e in mx.select(["torch213-cxx11-cpu-x86_64-linux"])] == ["torch213-cpu"]
    from kbuild.core.errors import BuildError
    with pytest.raises(BuildError, match="matches no environment"):
        mx.select(["torch99-*"])


def test_envs_json_lists_every_environment():
    proc = subprocess.run([sys.executable, "-m", "kbuild", "envs", str(REPO), "--json", "--no-probe"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert [r["name"] for r in rows] == [e.name for e in matrix.load(REPO).envs]
    assert rows[0]["variants"]["linux-64"] == "torch27-cxx11-cu126-x86_64-linux"


def test_workflows_pass_actionlint_with_shellcheck(tmp_path):
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert {"build-variants.yml", "locks.yml", "matrix-update.yml"} <= {f.name for f in files}
    proc = workflow_lint.actionlint(tmp_path, *files)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_workflow_fans_out_the_matrix():
    text = WORKFLOW.read_text()
    assert "kbuild envs . --json" in text  # the job list comes from pixi.toml, not a copy of it
    assert 'pixi run -e "${{ matrix.env }}" build' in text
    assert "pixi lock" in text and "prefix-dev/setup-pixi" in text
    assert "kbuild check" in text and "kbuild upload" in text
    import yaml

    build = yaml.safe_load(text)["jobs"]["build"]
    # Every job of the fan-out reads and fills one compiler cache.
    step = next(s for s in build["steps"] if s.get("run", "").startswith("pixi run"))
    assert step["env"]["SCCACHE_GHA_ENABLED"] == "true"
    assert any(s.get("uses", "").startswith("mozilla-actions/sccache-action@") for s in build["steps"])


def test_only_the_job_that_uploads_may_request_an_oidc_token_and_it_signs():
    import yaml

    flow = yaml.safe_load(WORKFLOW.read_text())
    assert flow["permissions"] == {"contents": "read"}  # the default of every other job
    uploading = [name for name, job in flow["jobs"].items()
                 if any("kbuild upload" in s.get("run", "") for s in job["steps"])]
    assert uploading == ["upload"]
    for name, job in flow["jobs"].items():
        granted = (job.get("permissions") or {}).get("id-token")
        assert granted == ("write" if name == "upload" else None), name
    job = flow["jobs"]["upload"]
    (step,) = [s for s in job["steps"] if "kbuild upload" in s.get("run", "")]
    # in pixi's default environment: a torch, so the variants of that torch load again
    assert shlex.split(step["run"]) == ["pixi", "run", "kbuild", "upload", ".", "--sign"]
    assert any(s.get("with", {}).get("environments") == "default" for s in job["steps"])
    assert step["env"] == {"HF_TOKEN": "${{ secrets.HF_TOKEN }}"}
    # after every build and the assembled check passed, on tags or when asked
    assert set(job["needs"]) == {"build", "assemble"}
    assert "needs.build.result == 'success'" in job["if"] and "refs/tags/v" in job["if"]
    assert any(s.get("with", {}).get("name") == "build" for s in job["steps"]
               if s.get("uses", "").startswith("actions/download-artifact@"))


def test_lock_workflow_checks_locks_and_runs_pixi_lock():
    text = (WORKFLOWS / "locks.yml").read_text()
    assert "kbuild lock --check" in text and "pull_request" in text
    assert "run: pixi lock" in text and "path: pixi.lock" in text  # uploaded
    assert "create-pull-request" in text and "add-paths: pixi.lock" in text  # committed when asked


def test_update_workflow_runs_weekly_and_opens_a_pull_request():
    import yaml

    flow = yaml.safe_load((WORKFLOWS / "matrix-update.yml").read_text())
    schedule = flow[True]["schedule"][0]["cron"].split()  # YAML reads the `on` key as True
    assert schedule[2:4] == ["*", "*"] and schedule[4] != "*", "not weekly"
    steps = "\n".join(s.get("run", "") + s.get("uses", "") for s in flow["jobs"]["update"]["steps"])
    assert "kbuild matrix update ." in steps and "--matrix tools/kbuild/resources/matrix/pixi.toml" in steps
    assert "kbuild lock --matrix" in steps and "kbuild lock --check" in steps
    assert "peter-evans/create-pull-request" in steps
