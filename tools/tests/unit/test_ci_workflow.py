"""The CI workflows the builder writes: one kernel project's (`kbuild init`, `kbuild
ci-workflow`) and a repository of many kernels' (`kbuild ci-workflow --monorepo`), the jobs
`kbuild ci-plan` fans out (pull requests: one variant per backend; releases: every variant,
GPU tests only on a runner of the variant's architecture), the fork gate in front of the GPU
runner, and the upload job that checks each artifact against its build job's digest before it
signs. Both pass actionlint with shellcheck and zizmor (offline); their shell steps are run here
with bash."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml
from packaging.version import Version
from typer.testing import CliRunner

import workflow_lint
from kbuild.cli import app
from kbuild import scaffold as init_cli
from kbuild.core import manifest as manifest_mod
from kbuild.core.errors import BuildError
from kbuild.matrix import ci, matrix
from kbuild.workflows import artifacts, writer

KNOWN = "pixi-kernel-builder @ git+https://example.org/pkb@0123456789abcdef0123456789abcdef01234567"
REPO = Path(__file__).resolve().parents[3]
SHARED = Path(os.environ.get("KBUILD_TEST_SHARED") or REPO.parent / "shared")
CI_CORPUS = SHARED / "corpus" / "kernels-community-40d4194f-ci.tar.gz"
SUBSET = SHARED / "corpus" / "kernels-community-40d4194f-subset.tar.gz"
# The pins of our workflows: the commits kernels-community pins for the same versions (and
# huggingface/kernels for create-pull-request).
PINS = {
    "actions/checkout": ("3d3c42e5aac5ba805825da76410c181273ba90b1", "v7.0.1"),
    "actions/setup-python": ("5fda3b95a4ea91299a34e894583c3862153e4b97", "v7.0.0"),
    "actions/upload-artifact": ("043fb46d1a93c77aae656e7c1c64a875d1fc6a0a", "v7.0.1"),
    "actions/download-artifact": ("3e5f45b2cfb9172054b4087a40e8e0b5a5461e7c", "v8.0.1"),
    "peter-evans/create-pull-request": ("5f6978faf089d4d20b00c7766989d076bb2fc7f1", "v8.1.1"),
}
# This repository's workflows use two actions no pinned file we hold names at a commit; they
# stay on their tags until someone who reaches GitHub pins them.
UNPINNED_HERE = {"prefix-dev/setup-pixi", "mozilla-actions/sccache-action"}
USES = re.compile(r"^\s*(?:- )?uses: (\S+?)@(\S+)(?:\s+#\s*(\S+))?\s*$", re.M)


@pytest.fixture(autouse=True)
def known_builder(monkeypatch):
    monkeypatch.setattr(writer, "builder_requirement", lambda: (KNOWN, True))


@pytest.fixture
def project(tmp_path) -> Path:
    opts = init_cli.InitOptions(name="my-kernel", repo_id="org/my-kernel",
                                backends=("cpu", "cuda"), noarch=False)
    target = tmp_path / "my-kernel"
    init_cli.create(target, opts, git=False)
    return target


@pytest.fixture
def monorepo(tmp_path) -> Path:
    """A repository of two kernels, one uploading outside the organisation, with the workflow."""
    root = tmp_path / "kernels"
    for name, repo in (("relu-ish", "acme/relu-ish"), ("vendor-op", "vendor/vendor-op")):
        init_cli.create(root / name, init_cli.InitOptions(name=name, repo_id=repo,
                                                          backends=("cpu", "cuda"), noarch=False),
                        git=False)
    writer.write(root, writer.workflow_file(writer.MONOREPO_NAME), writer.monorepo_workflow("acme"),
                 force=False)
    return root


def workflow(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def project_flow(project: Path) -> dict:
    return workflow(project / writer.PROJECT_WORKFLOW)


def mono_flow(root: Path) -> dict:
    return workflow(root / ".github/workflows/build.yaml")


def step(job: dict, name: str) -> dict:
    return next(s for s in job["steps"] if s.get("name") == name or s.get("id") == name)


def bash(script: str, cwd: Path, env: dict[str, str], path: Path | None = None
         ) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    """A `run:` script as GitHub's runner runs it (bash -eo pipefail), and what it wrote to
    $GITHUB_OUTPUT."""
    out = cwd / ".github_output"
    out.write_text("")
    full = {"PATH": (f"{path}:" if path else "") + os.environ["PATH"], "GITHUB_OUTPUT": str(out),
            "RUNNER_TEMP": str(cwd / ".runner_temp"), **env}
    (cwd / ".runner_temp").mkdir(exist_ok=True)
    proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
                          cwd=cwd, env=full, capture_output=True, text=True)
    outputs = dict(line.split("=", 1) for line in out.read_text().splitlines() if "=" in line)
    return proc, outputs


def stub_kbuild(folder: Path) -> Path:
    """A `kbuild` on PATH that records its arguments (the upload itself is tested elsewhere)."""
    folder.mkdir(parents=True, exist_ok=True)
    stub = folder / "kbuild"
    stub.write_text("#!/usr/bin/env python3\nimport json, os, sys\n"
                    "open(os.environ['CALLS'], 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n")
    stub.chmod(0o755)
    return folder


def calls(file: Path) -> list[list[str]]:
    return [json.loads(line) for line in file.read_text().splitlines()]


# -- the project workflow ---------------------------------------------------------------------

def test_the_project_workflow_builds_tests_where_variants_run_and_signs_only_where_it_uploads(
        project):
    flow = project_flow(project)
    assert flow["env"]["KBUILD"] == KNOWN
    assert flow["permissions"] == {"contents": "read"}
    jobs = flow["jobs"]
    assert list(jobs) == ["plan", "build", "test", "test-gpu", "upload"]
    plan = step(jobs["plan"], "plan")["run"]
    assert 'kbuild ci-plan . --mode "$MODE" --gpu-runner "$GPU_RUNNER"' in plan
    for name, key in (("build", "builds"), ("test", "tests"), ("test-gpu", "gpu_tests")):
        assert jobs[name]["strategy"]["matrix"]["include"] == \
            f"${{{{ fromJSON(needs.plan.outputs.{key}) }}}}"
        assert jobs[name]["runs-on"] == "${{ matrix.runner }}"
    build = "\n".join(s.get("run", "") for s in jobs["build"]["steps"])
    assert 'kbuild build . -L --backend "$BACKEND" ${ENV_NAME:+--env "$ENV_NAME"}' in build
    assert "kbuild check . --no-load" in build
    for name in ("test", "test-gpu"):
        runs = "\n".join(s.get("run", "") + s.get("uses", "") for s in jobs[name]["steps"])
        assert 'kbuild test . --env "$ENV_NAME" --ci' in runs and "kbuild build" not in runs
    upload = jobs["upload"]
    assert "needs.plan.outputs.mode == 'release'" in upload["if"]
    assert upload["permissions"] == {"contents": "read", "id-token": "write"}
    assert [n for n, j in jobs.items() if "id-token" in j.get("permissions", {})] == ["upload"]
    assert "kbuild upload . --repo-type kernel" in step(upload, "Sign and upload")["run"]


def test_both_workflows_pass_actionlint_with_shellcheck(project, monorepo, tmp_path):
    """Our own suite once failed wherever shellcheck was installed (SC2209 in `mode=pr`)."""
    proc = workflow_lint.actionlint(tmp_path, project / writer.PROJECT_WORKFLOW,
                                    monorepo / ".github/workflows/build.yaml")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_actionlint_reports_what_shellcheck_finds(tmp_path):
    """The lint above cannot pass for want of shellcheck: its finding must come through."""
    bad = tmp_path / "bad.yml"
    bad.write_text(workflow_lint.KNOWN_FINDING)
    proc = workflow_lint.run_actionlint(bad)
    assert proc.returncode == 1 and "SC2209" in proc.stdout and "shellcheck" in proc.stdout


def test_both_workflows_have_no_zizmor_finding(project, monorepo):
    proc = workflow_lint.zizmor(project / writer.PROJECT_WORKFLOW,
                                monorepo / ".github/workflows/build.yaml")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "No findings to report" in proc.stdout + proc.stderr


def test_this_repositorys_workflows_have_only_the_known_zizmor_findings():
    """Ours: pinned, no persisted credentials, the token in an environment. Left: the two
    actions we hold no pinned commit of, and sccache's cache on a tag build."""
    files = sorted((REPO / ".github" / "workflows").glob("*.yml"))
    proc = subprocess.run([workflow_lint.tool("zizmor"), "--offline", "--format", "json",
                           *map(str, files)], capture_output=True, text=True)
    findings = json.loads(proc.stdout)
    left = set()
    for f in findings:
        feature = next(loc["concrete"]["feature"] for loc in f["locations"]
                       if loc["symbolic"]["kind"] == "Primary")
        left.add((f["ident"], feature.split("@")[0].split("uses: ")[-1]))
    assert left <= {("unpinned-uses", a) for a in UNPINNED_HERE} | {
        ("cache-poisoning", "mozilla-actions/sccache-action")}, left


def all_workflows(project: Path, monorepo: Path) -> list[Path]:
    return [project / writer.PROJECT_WORKFLOW, monorepo / ".github/workflows/build.yaml",
            *sorted((REPO / ".github" / "workflows").glob("*.yml"))]


def test_every_action_is_pinned_by_commit_with_its_version_in_a_comment(project, monorepo):
    seen = set()
    for path in all_workflows(project, monorepo):
        for action, ref, comment in USES.findall(path.read_text()):
            if path.parent.parent.parent == REPO and action in UNPINNED_HERE:
                continue
            assert (ref, comment) == PINS[action], f"{path.name}: {action}@{ref} # {comment}"
            seen.add(action)
    assert seen == set(PINS)


def test_the_pins_are_the_commits_kernels_community_pins():
    if not CI_CORPUS.is_file():
        pytest.skip(f"kernels-community's workflows are test input beside the checkout "
                    f"({CI_CORPUS}), absent here")
    theirs = set()
    with tarfile.open(CI_CORPUS) as tar:
        for member in tar.getmembers():
            if member.isfile() and member.name.endswith((".yaml", ".yml")):
                text = tar.extractfile(member).read().decode()
                theirs |= {(a, (r, c)) for a, r, c in USES.findall(text)}
    ours = {(a, p) for a, p in PINS.items() if a != "peter-evans/create-pull-request"}
    assert ours <= theirs


def test_checkouts_persist_no_credentials_and_secrets_live_in_an_environment(project, monorepo):
    for path in all_workflows(project, monorepo):
        for name, job in workflow(path)["jobs"].items():
            for s in job["steps"]:
                if s.get("uses", "").startswith("actions/checkout@"):
                    assert s["with"]["persist-credentials"] is False, f"{path.name}: {name}"
            if "secrets." in json.dumps(job).replace("secrets.GITHUB_TOKEN", ""):
                assert job.get("environment") == "hub-upload", f"{path.name}: {name}"
    assert "pull_request_target" not in json.dumps([workflow(p) for p in all_workflows(project,
                                                                                       monorepo)])


def test_git_is_installed_before_the_checkout_in_cuda_containers(project, monorepo):
    for flow in (project_flow(project), mono_flow(monorepo)):
        steps = flow["jobs"]["build"]["steps"]
        names = [s.get("name") or s.get("uses", "").split("@")[0] for s in steps]
        git = names.index("git and Python in the CUDA container")
        assert git < names.index("actions/checkout")
        assert "git" in steps[git]["run"] and steps[git]["if"] == "matrix.container != ''"


# -- the jobs (matrix/ci.py) -------------------------------------------------------------------

def plan(project: Path, mode: str, **kw) -> ci.CiPlan:
    return ci.plan(project, matrix.load(project), mode, gpu_runner="gpu-x86", **kw)


def test_pr_jobs_build_one_variant_per_backend_and_gpu_test_the_cuda_one_on_x86(project):
    specs = list(matrix.load(project).envs)
    pr = plan(project, "pr")
    assert sorted(j.backend for j in pr.builds) == ["cpu", "cuda"]
    assert {j.platform for j in pr.builds} == {"linux-64"} and {j.container for j in pr.builds} == {""}
    newest = max((s for s in specs if s.cuda and s.toolkit_wheels),
                 key=lambda s: (Version(s.torch_version), Version(s.cuda)))
    cuda = next(j for j in pr.builds if j.backend == "cuda")
    assert cuda.env == newest.name
    assert [(t.variant, t.runner, t.gpu) for t in pr.tests if t.backend == "cuda"] == [
        (cuda.variant, "gpu-x86", True)]
    assert [j.slot for j in pr.builds] == [0, 1]
    only_cpu = plan(project, "pr", backends=("cpu",))
    assert [(j.backend, j.slot) for j in only_cpu.builds] == [("cpu", 0)]
    assert [t.backend for t in only_cpu.tests] == ["cpu"]


def test_release_gpu_tests_run_only_on_a_runner_of_the_variants_architecture(project):
    release = plan(project, "release")
    specs = list(matrix.load(project).envs)
    want = {(s.name, s.variant(p)) for s in specs for p in s.platforms if p in ci.RUNNERS}
    assert {(j.env, j.variant) for j in release.builds} == want
    cuda_arm = {j.variant for j in release.builds if j.backend == "cuda" and "aarch64" in j.variant}
    assert cuda_arm, "the default matrix has aarch64 CUDA variants"
    gpu = [t for t in release.tests if t.gpu]
    assert gpu and all(t.platform == "linux-64" and t.runner == "gpu-x86" for t in gpu)
    assert any("aarch64" in n and "GPU_RUNNER_AARCH64" in n for n in release.notes)
    cpu_arm = [t for t in release.tests if t.backend == "cpu" and t.platform == "linux-aarch64"]
    assert cpu_arm and all(t.runner == "ubuntu-24.04-arm" and not t.gpu for t in cpu_arm)
    with_arm = plan(project, "release", gpu_runner_aarch64="gpu-arm")
    assert {t.variant for t in with_arm.tests if t.runner == "gpu-arm"} == cuda_arm
    cu12 = [j for j in release.builds if j.cuda.startswith("12.")]
    assert cu12 and all(j.container.startswith(f"nvidia/cuda:{j.cuda}.") for j in cu12)
    assert len({j.slot for j in release.builds}) == len(release.builds)


def test_a_noarch_release_builds_every_backend_it_lists(tmp_path):
    root = tmp_path / "py-op"
    init_cli.create(root, init_cli.InitOptions("py-op", "org/py-op", ("cpu", "cuda"), True), git=False)
    text = (root / "build.toml").read_text()
    (root / "build.toml").write_text(re.sub(r"backends = \[.*\]",
                                            'backends = ["cpu", "cuda", "rocm", "xpu", "metal"]', text))
    for mode in ("release", "pr"):
        p = plan(root, mode)
        assert [j.variant for j in p.builds] == ["torch-cpu", "torch-cuda", "torch-rocm",
                                                 "torch-xpu", "torch-metal"]
        assert {j.env for j in p.builds} == {""}  # a noarch variant needs no environment
        assert {(t.variant, t.gpu) for t in p.tests} == {("torch-cpu", False), ("torch-cuda", True)}
        assert any("torch-rocm" in n and "no rocm runner" in n for n in p.notes)


def load(root: Path) -> manifest_mod.Manifest:
    return manifest_mod.load(root, warn=lambda _: None)


def kernel_with(tmp_path: Path, name: str, hub: str, version: int = 1) -> Path:
    root = tmp_path / name
    root.mkdir()
    (root / "build.toml").write_text(f'[general]\nname = "{name}"\nversion = {version}\n'
                                     f'license = "apache-2.0"\nbackends = ["cpu"]\n'
                                     f'[torch-noarch]\n{hub}')
    (root / "torch-ext" / name.replace("-", "_")).mkdir(parents=True)
    (root / "torch-ext" / name.replace("-", "_") / "__init__.py").write_text("")
    return root


@pytest.mark.parametrize("hub, prefix, want", [
    # kernels-community's hub_pr_upload_args.py cases, with their organisation as `org`
    ('[general.hub]\nrepo-id = "kernels-community/op"\n', "kernels-community",
     ("kernels-community/op", False)),
    ('[general.hub]\nrepo-id = "MiniMaxAI/op"\n', "kernels-community", ("", True)),
    ('[general.hub]\nrepo-id = "sgl-project/op"\n', "kernels-staging", ("kernels-staging/op", False)),
    ("", "kernels-community", ("kernels-community/op", False)),
])
def test_upload_targets_follow_kernels_community(tmp_path, hub, prefix, want):
    target = ci.upload_target(load(kernel_with(tmp_path, "op", hub)), "op", prefix,
                              "kernels-community", None)
    assert (target.repo_id, target.create_pr) == want


def test_version_1_without_a_branch_of_its_own_also_goes_to_main(tmp_path):
    def main_too(name, hub, version=1, branch=None):
        return ci.upload_target(load(kernel_with(tmp_path, name, hub, version)), name, None,
                                None, branch).also_main
    plain = '[general.hub]\nrepo-id = "org/op"\n'
    assert main_too("op-a", plain) is True
    assert main_too("op-b", plain, branch="v1-beta") is False
    assert main_too("op-c", plain, version=2) is False
    assert main_too("op-d", '[general.hub]\nrepo-id = "org/d"\nbranch = "release"\n') is False
    with pytest.raises(BuildError, match="no repo-id") as e:
        main_too("op-e", "")
    assert e.value.key == "general.hub.repo-id"


def test_build_concurrency_json_limits_a_kernels_builds(project, tmp_path):
    limits = tmp_path / "build-concurrency.json"
    limits.write_text(json.dumps({"my-kernel": {"cuda": {"max-jobs": 1, "cores": 4}},
                                  "other": {"cpu": {"cores": 2}}}))
    p = plan(project, "pr", concurrency_file=limits)
    assert {(j.backend, j.max_jobs, j.cores) for j in p.builds} == {("cuda", 1, 4),
                                                                     ("cpu", None, None)}
    for bad, key in (({"my-kernel": {"cuda": {"cores": True}}}, "my-kernel.cuda.cores"),
                     ({"my-kernel": {"gpu": {"cores": 2}}}, "my-kernel.gpu"),
                     ({"my-kernel": {"cuda": {"jobs": 2}}}, "my-kernel.cuda.jobs")):
        limits.write_text(json.dumps(bad))
        with pytest.raises(BuildError) as e:
            plan(project, "pr", concurrency_file=limits)
        assert (e.value.file, e.value.key) == (limits, key)


def test_cuda_containers_pinned_by_digest_in_pixi_toml(project):
    digest = "nvidia/cuda:12.6.3-devel-ubuntu24.04@sha256:" + "ab" * 32
    pixi = project / "pixi.toml"
    pixi.write_text(pixi.read_text() + f'\n[tool.kbuild.ci.containers]\n"12.6" = "{digest}"\n')
    release = plan(project, "release")
    assert {j.container for j in release.builds if j.cuda == "12.6"} == {digest}
    assert {j.container for j in release.builds if j.cuda == "12.8"} == {
        "nvidia/cuda:12.8.1-devel-ubuntu24.04"}
    pixi.write_text(pixi.read_text().replace(digest, "nvidia/cuda:12.6.3-devel-ubuntu24.04"))
    with pytest.raises(BuildError, match="not an image pinned by digest") as e:
        plan(project, "release")
    assert (e.value.file, e.value.key) == (pixi, "tool.kbuild.ci.containers.12.6")


def test_ci_plan_prints_the_outputs_the_workflows_read(project, monkeypatch):
    monkeypatch.chdir(project)
    result = CliRunner().invoke(app, ["ci-plan", ".", "--mode", "release", "--gpu-runner",
                                      "gpu-x86"])
    assert result.exit_code == 0, result.output
    outputs = dict(line.split("=", 1) for line in result.stdout.splitlines())
    assert set(outputs) == {"builds", "tests", "gpu_tests", "repo_id", "create_pr",
                            "upload_main", "torch"}
    assert (outputs["repo_id"], outputs["create_pr"], outputs["upload_main"]) == (
        "org/my-kernel", "false", "true")
    assert all(r["runner"] == "gpu-x86" for r in json.loads(outputs["gpu_tests"]))
    specs = matrix.load(project).envs
    assert outputs["torch"] == max((s.torch_version for s in specs if s.cuda is None), key=Version)
    for args in (["--mode", "nightly"], ["--gpu-runner", "a b"], ["--backends", "gpu"],
                 ["--repo-prefix", "../x"]):
        bad = CliRunner().invoke(app, ["ci-plan", ".", *args])
        assert isinstance(bad.exception, BuildError), (args, bad.output)


def test_a_cuda_only_project_gets_no_cpu_job_and_envs_ci_prints_one_json_line(tmp_path,
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


# -- the fork gate and the artifacts (issue 48, item 5) ---------------------------------------

def test_a_forks_pull_request_reaches_the_gpu_runner_only_by_a_maintainers_label(project,
                                                                                 monorepo):
    for flow, first in ((project_flow(project), "plan"), (mono_flow(monorepo), "setup")):
        assert flow[True]["pull_request"]["types"] == ["opened", "synchronize", "reopened",
                                                        "labeled"]  # yaml reads `on` as True
        jobs = flow["jobs"]
        gate = " ".join(jobs["test-gpu"]["if"].split())
        assert ("github.event_name != 'pull_request' || github.event.pull_request.head.repo"
                ".full_name == github.repository || (github.event.action == 'labeled' && "
                "github.event.label.name == 'safe-to-test')") in gate
        # other labels start nothing; the CPU test job needs no gate
        assert "github.event.label.name == 'safe-to-test'" in jobs[first]["if"]
        assert "labeled" not in jobs["test"].get("if", "")
        gpu = json.dumps(jobs["test-gpu"])
        assert "secrets." not in gpu and "id-token" not in gpu and "environment" not in gpu
        assert "github.event.label.name" in flow["concurrency"]["group"]


def test_the_upload_job_checks_every_artifact_against_its_build_jobs_digest(project, monorepo):
    for flow, first in ((project_flow(project), "plan"), (mono_flow(monorepo), "setup")):
        jobs = flow["jobs"]
        outputs = jobs["build"]["outputs"]
        assert len(outputs) == ci.MAX_JOBS == 256  # GitHub's largest matrix
        assert outputs["d0"] == "${{ steps.digest.outputs.d0 }}"
        assert outputs["d255"] == "${{ steps.digest.outputs.d255 }}"
        build = [s.get("name") or s.get("uses", "").split("@")[0] for s in jobs["build"]["steps"]]
        assert build.index("Record the variant's digest") < build.index("actions/upload-artifact")
        upload = jobs["upload"]
        names = [s.get("name") or s.get("uses", "").split("@")[0] for s in upload["steps"]]
        verify = step(upload, "Every artifact as its build job recorded it")
        assert verify["env"]["RECORDED"] == "${{ toJSON(needs.build.outputs) }}"
        assert 'kbuild ci-digest --verify "$RUNNER_TEMP/artifacts"' in verify["run"]
        assert names.index("actions/download-artifact") < names.index(verify["name"]) \
            < names.index("Assemble build/") < names.index("Sign and upload")


def variant(folder: Path, name: str, prefix: str = "") -> Path:
    """A variant's files in folder/<prefix><name> (an artifact: prefix `variant-`)."""
    v = folder / f"{prefix}{name}"
    (v / "sub").mkdir(parents=True)
    (v / "metadata.json").write_text('{"version": 1}')
    (v / f"_{name}.abi3.so").write_bytes(b"\x7fELF")
    (v / "sub" / "__init__.py").write_text("")
    return v


def test_ci_digest_records_in_the_build_job_and_refuses_a_replaced_artifact(project, tmp_path):
    """The two steps as the workflow runs them (bash, kbuild on PATH), on artifacts a
    persistent runner replaced, dropped or added."""
    flow = project_flow(project)
    record = step(flow["jobs"]["build"], "Record the variant's digest")["run"]
    verify = step(flow["jobs"]["upload"], "Every artifact as its build job recorded it")["run"]
    path = Path(sys.executable).parent  # the kbuild of this interpreter
    work = tmp_path / "job"
    recorded = {}
    for slot, name in enumerate(("torch213-cxx11-cpu-x86_64-linux", "torch-cuda")):
        variant(work / "build", name)
        proc, out = bash(record, work, {"VARIANT": name, "SLOT": str(slot)}, path)
        assert proc.returncode == 0, proc.stderr
        recorded.update(out)
    assert set(recorded) == {"d0", "d1"}
    recorded.update({f"d{i}": "" for i in range(2, 256)})  # slots no job used

    def check(arrange) -> subprocess.CompletedProcess:
        runner = tmp_path / f"upload-{len(list(tmp_path.iterdir()))}"
        arts = runner / ".runner_temp" / "artifacts"
        for name in ("torch213-cxx11-cpu-x86_64-linux", "torch-cuda"):
            variant(arts, name, prefix="variant-")  # what download-artifact writes
        arrange(arts)
        proc, _ = bash(verify, runner, {"RECORDED": json.dumps(recorded)}, path)
        return proc

    ok = check(lambda arts: None)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "2 variant(s) as their build jobs recorded them" in ok.stdout
    replaced = check(lambda a: (a / "variant-torch-cuda" / "_torch-cuda.abi3.so").write_bytes(b"evil"))
    assert replaced.returncode == 2 and "torch-cuda: differs" in replaced.stderr
    assert "nothing was signed or uploaded" in replaced.stderr
    extra = check(lambda a: variant(a, "torch-rocm", prefix="variant-"))
    assert extra.returncode == 2 and "torch-rocm: downloaded, but no build job recorded it" in extra.stderr
    lost = check(lambda a: shutil.rmtree(a / "variant-torch-cuda"))
    assert lost.returncode == 2 and "torch-cuda: recorded by its build job, not downloaded" in lost.stderr


def test_artifacts_verify_reads_the_build_jobs_outputs(tmp_path):
    v = variant(tmp_path / "arts", "torch-cpu", prefix="variant-")
    digest = artifacts.tree_digest(v)
    assert artifacts.recorded(json.dumps({"d0": f"torch-cpu:{digest}", "d1": ""})) == {
        "torch-cpu": digest}
    for bad in ("[]", '{"d0": "torch-cpu"}', "{nope"):
        with pytest.raises(BuildError):
            artifacts.recorded(bad)
    (v / "link").symlink_to(v / "metadata.json")
    with pytest.raises(BuildError, match="not a plain file"):
        artifacts.tree_digest(v)


# -- the upload step (bash, with a recording kbuild) ------------------------------------------

def test_the_project_upload_step_uploads_signed_then_version_1_to_main(project, tmp_path):
    script = step(project_flow(project)["jobs"]["upload"], "Sign and upload")["run"]
    log = tmp_path / "calls.jsonl"
    env = {"CALLS": str(log), "REPO_ID": "org/my-kernel", "CREATE_PR": "false",
           "UPLOAD_MAIN": "true"}
    proc, _ = bash(script, tmp_path, env, stub_kbuild(tmp_path / "bin"))
    assert proc.returncode == 0, proc.stderr
    temp = str(tmp_path / ".runner_temp")
    assert calls(log) == [
        ["upload", ".", "--repo-type", "kernel", "--repo-id", "org/my-kernel", "--sign",
         "--output-json", f"{temp}/upload.json"],
        ["upload", ".", "--repo-type", "kernel", "--repo-id", "org/my-kernel", "--branch", "main",
         "--require-signature", "--output-json", f"{temp}/upload-main.json"]]
    log.unlink()
    proc, _ = bash(script, tmp_path, {**env, "CREATE_PR": "true", "UPLOAD_MAIN": "false"},
                   tmp_path / "bin")
    assert calls(log) == [["upload", ".", "--repo-type", "kernel", "--repo-id", "org/my-kernel",
                           "--create-pr", "--sign", "--output-json", f"{temp}/upload.json"]]


def test_the_monorepo_upload_step_calls_upload_as_kernels_community_does(monorepo, tmp_path):
    script = step(mono_flow(monorepo)["jobs"]["upload"], "Sign and upload")["run"]
    log = tmp_path / "calls.jsonl"
    temp = str(tmp_path / ".runner_temp")
    path = stub_kbuild(tmp_path / "bin")
    cases = [  # (repo_id, create_pr, main, target branch) -> the calls
        (("acme-staging/op", "false", "true", ""), [
            ["--repo-id", "acme-staging/op", "--sign", "--output-json", f"{temp}/upload.json"],
            ["--repo-id", "acme-staging/op", "--branch", "main", "--require-signature",
             "--output-json", f"{temp}/upload-main.json"]]),
        (("", "true", "false", "v2-rc"), [
            ["--create-pr", "--branch", "v2-rc", "--sign", "--output-json", f"{temp}/upload.json"]]),
    ]
    for (repo, pr, main, branch), want in cases:
        log.unlink(missing_ok=True)
        proc, _ = bash(script, tmp_path, {"CALLS": str(log), "REPO_ID": repo, "CREATE_PR": pr,
                                          "UPLOAD_MAIN": main, "TARGET_BRANCH": branch}, path)
        assert proc.returncode == 0, proc.stderr
        assert calls(log) == [["upload", ".", "--repo-type", "kernel", *w] for w in want]


def test_the_upload_job_installs_an_exact_torch_from_the_pytorch_index_alone(project, monorepo):
    for flow in (project_flow(project), mono_flow(monorepo)):
        install = step(flow["jobs"]["upload"], "The builder, and the torch upload loads variants with")
        assert install["run"].splitlines()[0] == \
            'pip install --index-url https://download.pytorch.org/whl/cpu "torch==$TORCH"'
        assert "extra-index-url" not in install["run"]
        assert install["env"]["TORCH"].endswith(".outputs.torch }}")


# -- the monorepo's setup (bash) ---------------------------------------------------------------

@pytest.mark.parametrize("title, kernel", [
    ("relu-ish: faster", "relu-ish"), ("  vendor-op : tidy", "vendor-op"),
    ("no colon here", ""), ("missing: x", ""), ("../relu-ish: x", ""), ("-rf: x", ""),
    ("relu-ish $(id): x", ""),
])
def test_a_pull_requests_title_names_its_kernel(monorepo, title, kernel):
    script = step(mono_flow(monorepo)["jobs"]["setup"], "kernel")["run"]
    proc, out = bash(script, monorepo, {"EVENT": "pull_request", "PR_TITLE": title, "MODE": "pr"})
    assert proc.returncode == 0, proc.stderr  # a pull request that names none builds nothing
    assert out == {"kernel": kernel}
    if not kernel:
        assert "::notice::" in proc.stdout and "nothing to build" in proc.stdout


def test_a_manual_run_names_an_existing_kernel_or_fails(monorepo):
    script = step(mono_flow(monorepo)["jobs"]["setup"], "kernel")["run"]
    env = {"EVENT": "workflow_dispatch", "MODE": "release"}
    proc, out = bash(script, monorepo, {**env, "KERNEL": "vendor-op"})
    assert proc.returncode == 0 and out == {"kernel": "vendor-op"}
    for bad in ("nope", "../etc", ""):
        proc, out = bash(script, monorepo, {**env, "KERNEL": bad})
        assert proc.returncode == 1 and "::error::" in proc.stdout and out == {}
    (monorepo / "vendor-op" / ".skip-release-ci").write_text("")
    proc, _ = bash(script, monorepo, {**env, "KERNEL": "vendor-op"})
    assert proc.returncode == 1 and ".skip-release-ci" in proc.stdout


def test_a_release_runs_only_on_the_default_branch(monorepo):
    script = step(mono_flow(monorepo)["jobs"]["setup"], "mode")["run"]
    base = {"EVENT": "workflow_dispatch", "DEFAULT_BRANCH": "main"}
    proc, out = bash(script, monorepo, {**base, "MODE": "release", "REF": "refs/heads/main"})
    assert proc.returncode == 0 and out == {"mode": "release"}
    proc, out = bash(script, monorepo, {**base, "MODE": "release", "REF": "refs/heads/feature"})
    assert proc.returncode == 1 and "a release runs on main" in proc.stdout and out == {}
    proc, out = bash(script, monorepo, {**base, "MODE": "pr", "REF": "refs/heads/feature"})
    assert out == {"mode": "pr"}
    proc, out = bash(script, monorepo, {**base, "EVENT": "pull_request", "MODE": "",
                                        "REF": "refs/pull/3/merge"})
    assert out == {"mode": "pr"}


def test_every_monorepo_step_runs_in_the_kernels_folder(monorepo):
    jobs = mono_flow(monorepo)["jobs"]
    for name in ("build", "test", "test-gpu", "upload"):
        assert jobs[name]["defaults"]["run"]["working-directory"] == \
            "${{ needs.setup.outputs.kernel }}"
        assert "build" in jobs[name]["needs"] or jobs[name]["if"] == "needs.setup.outputs.kernel != ''"
    for name in ("build", "test", "test-gpu"):
        paths = [s["with"]["path"] for s in jobs[name]["steps"] if "artifact@" in s.get("uses", "")]
        assert paths == ["${{ needs.setup.outputs.kernel }}/build/${{ matrix.variant }}"]
    plan = step(jobs["setup"], "plan")
    assert '--repo-prefix "$REPO_PREFIX" --org "acme"' in plan["run"]
    assert plan["env"]["REPO_PREFIX"] == "${{ inputs.repo_prefix || 'acme' }}"
    inputs = mono_flow(monorepo)[True]["workflow_dispatch"]["inputs"]
    assert {"kernel_name", "mode", "target_branch", "upload", "repo_prefix", "backends"} <= set(inputs)


def test_the_monorepo_plan_of_kernels_community_projects(tmp_path):
    if not SUBSET.is_file():
        pytest.skip(f"kernels-community's projects are test input beside the checkout ({SUBSET}), "
                    "absent here")
    with tarfile.open(SUBSET) as tar:
        tar.extractall(tmp_path, members=[m for m in tar.getmembers()
                                          if m.name.split("/")[0] in ("relu", "activation")],
                       filter="data")
    relu = ci.plan(tmp_path / "relu", matrix.load(tmp_path / "relu"), "release",
                   gpu_runner="gpu-x86", repo_prefix="kernels-community", org="kernels-community")
    # 22 of relu's CUDA test jobs once went to the x86 runner with aarch64 variants
    assert [t.variant for t in relu.tests if t.gpu and "aarch64" in t.variant] == []
    assert any("aarch64" in j.variant and j.backend == "cuda" for j in relu.builds)
    assert relu.upload == ci.UploadTarget("kernels-community/relu", False, True)
    assert any("metal, rocm, xpu" in n for n in relu.notes)  # listed, not built here
    staging = ci.plan(tmp_path / "activation", matrix.load(tmp_path / "activation"), "release",
                      gpu_runner="gpu-x86", repo_prefix="kernels-staging", org="kernels-community")
    assert staging.upload.repo_id == "kernels-staging/activation"


# -- writing the files -------------------------------------------------------------------------

def test_ci_workflow_writes_into_an_existing_project_and_never_overwrites(project, monkeypatch):
    (project / writer.PROJECT_WORKFLOW).unlink()
    monkeypatch.chdir(project)
    first = CliRunner().invoke(app, ["ci-workflow"])
    assert first.exit_code == 0, first.output
    assert (project / writer.PROJECT_WORKFLOW).read_text() == writer.project_workflow()
    (project / writer.PROJECT_WORKFLOW).write_text("mine\n")
    again = CliRunner().invoke(app, ["ci-workflow"])
    assert isinstance(again.exception, BuildError) and "exists" in str(again.exception)
    assert (project / writer.PROJECT_WORKFLOW).read_text() == "mine\n"


def test_ci_workflow_force_never_writes_through_a_link(project, tmp_path, monkeypatch):
    """The old temporary file, `.kernel.yml.tmp`, was written through whatever link stood there."""
    outside = tmp_path / "outside.txt"
    outside.write_text("untouched\n")
    folder = project / ".github" / "workflows"
    (folder / ".kernel.yml.tmp").symlink_to(outside)
    monkeypatch.chdir(project)
    result = CliRunner().invoke(app, ["ci-workflow", "--force"])
    assert result.exit_code == 0, result.output
    assert outside.read_text() == "untouched\n"
    assert (folder / "kernel.yml").read_text() == writer.project_workflow()
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp") and not p.is_symlink()]
    # a link at the target is replaced, not written through
    (folder / "kernel.yml").unlink()
    (folder / "kernel.yml").symlink_to(outside)
    refused = CliRunner().invoke(app, ["ci-workflow"])
    assert isinstance(refused.exception, BuildError) and "exists" in str(refused.exception)
    assert CliRunner().invoke(app, ["ci-workflow", "--force"]).exit_code == 0
    assert outside.read_text() == "untouched\n" and not (folder / "kernel.yml").is_symlink()
    # a linked .github is refused
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    other = tmp_path / "other"
    init_cli.create(other, init_cli.InitOptions("other", "org/other", ("cpu",), True), git=False)
    shutil.rmtree(other / ".github")
    (other / ".github").symlink_to(elsewhere)
    linked = CliRunner().invoke(app, ["ci-workflow", str(other)])
    assert isinstance(linked.exception, BuildError) and "symbolic link" in str(linked.exception)
    assert list(elsewhere.iterdir()) == []


def test_ci_workflow_monorepo_writes_at_the_repositorys_root(tmp_path, monkeypatch):
    root = tmp_path / "repo"
    for name in ("alpha", "beta"):
        init_cli.create(root / name, init_cli.InitOptions(name, f"acme/{name}", ("cpu",), True),
                        git=False)
    monkeypatch.chdir(root)
    result = CliRunner().invoke(app, ["ci-workflow", "--monorepo"])
    assert result.exit_code == 0, result.output
    written = root / ".github" / "workflows" / "build.yaml"
    assert written.read_text() == writer.monorepo_workflow("acme")  # acme: the build.tomls' org
    assert "2 kernels: alpha, beta; uploads to acme" in result.stdout
    assert not (root / "alpha" / ".github" / "workflows" / "build.yaml").exists()
    named = CliRunner().invoke(app, ["ci-workflow", "--monorepo", "--org", "acme-labs",
                                     "--name", "kernels"])
    assert named.exit_code == 0, named.output
    assert "default: \"acme-labs\"" in (root / ".github/workflows/kernels.yml").read_text()
    inside = CliRunner().invoke(app, ["ci-workflow", "--monorepo", "alpha"])
    assert isinstance(inside.exception, BuildError) and "is a kernel project" in str(inside.exception)
    empty = tmp_path / "empty"
    empty.mkdir()
    none = CliRunner().invoke(app, ["ci-workflow", "--monorepo", str(empty)])
    assert isinstance(none.exception, BuildError) and "no kernel folder" in str(none.exception)
    for bad in (["--org", "a/b"], ["--name", "../x"]):
        refused = CliRunner().invoke(app, ["ci-workflow", "--monorepo", "--force", *bad])
        assert isinstance(refused.exception, BuildError), bad


def test_a_project_workflow_below_the_repositorys_root_is_warned(tmp_path, monkeypatch):
    root = tmp_path / "repo"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    init_cli.create(root / "op", init_cli.InitOptions("op", "acme/op", ("cpu",), True), git=False)
    warned: list[str] = []
    monkeypatch.setattr("kbuild.cli.ci.warn", warned.append)
    result = CliRunner().invoke(app, ["ci-workflow", str(root / "op"), "--force"])
    assert result.exit_code == 0, result.output
    assert any("only at the repository's root" in w and "--monorepo" in w for w in warned)


def test_an_unknown_builder_source_is_a_placeholder_and_a_warning(monkeypatch):
    warned: list[str] = []
    monkeypatch.setattr(writer, "builder_requirement",
                        lambda: (writer.PLACEHOLDER_REQUIREMENT, False))
    text = writer.project_workflow(warned.append)
    assert writer.PLACEHOLDER_REQUIREMENT in text and "@KBUILD_REQUIREMENT@" not in text
    assert warned and "set KBUILD" in warned[0]
