"""Real kernel-builder projects (huggingface/kernels-community, unchanged): every one plans and
generates its build files for CUDA 13 and CPU in-process, and the project runner builds relu's
CPU variant and runs relu's own tests against it.

The projects are test input kept beside the checkout (../shared/corpus/*.tar.gz); a clone
without them skips these tests, saying so. tests/compat/run_projects.py builds and tests the
same projects on a GPU (docs/gpu/community.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from packaging.version import Version

from kbuild_testing import REPO, fake_toolkit, fake_torch
from kbuild.core import manifest as manifest_mod
from kbuild.stages import generate, plan

CORPUS_DIR = REPO.parent / "shared" / "corpus"
TARBALLS = sorted(CORPUS_DIR.glob("kernels-community-*.tar.gz")) if CORPUS_DIR.is_dir() else []
pytestmark = pytest.mark.skipif(not TARBALLS, reason=f"no kernels-community projects in "
                                f"{CORPUS_DIR} (test input kept beside the checkout, not in it)")
ARCHS_130 = ["7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "9.0a", "10.0", "10.0a", "10.0f", "10.3",
             "11.0", "12.0", "12.1"]


@pytest.fixture(scope="module")
def projects(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("community")
    with tarfile.open(TARBALLS[-1]) as tar:
        tar.extractall(root, filter="data")
    return {p.name: p for p in sorted(root.iterdir()) if (p / "build.toml").is_file()}


def cuda_toolkit(root: Path):
    toolkit = fake_toolkit("13.0", ARCHS_130)
    toolkit.__dict__.update(include_dirs=[str(root / "cuda" / "include")],
                            cudart=str(root / "cuda" / "lib64" / "libcudart.so"))
    return toolkit


def planned(project: Path, backend: str, monkeypatch) -> plan.VariantPlan:
    monkeypatch.setattr(plan, "find_cuda", lambda torch, *a, **k: cuda_toolkit(project.parent))
    torch = fake_torch("2.14.1", cuda="13.0" if backend == "cuda" else None)
    return plan.plan_variant(project, manifest_mod.load(project), torch, backend)


def test_the_subset_is_there(projects):
    assert {"activation", "relu", "rotary", "megablocks", "mamba-ssm"} <= set(projects)


@pytest.mark.parametrize("backend", ["cuda", "cpu"])
def test_every_project_plans_and_generates(projects, backend, monkeypatch):
    for name, project in projects.items():
        m = manifest_mod.load(project)
        if backend not in m.general.backends:
            continue
        p = planned(project, backend, monkeypatch)
        # A variant compiles its own backend's kernels only (relu and rotary define a function
        # once per backend).
        assert {k.backend for k in p.kernels.values()} == {backend}, name
        cmake = generate.plan_cmake(p)
        assert f'set(KB_BACKEND "{backend}")' in cmake, name
        if backend == "cuda":
            assert '"--expt-extended-lambda"' in cmake and '"USE_CUDA=1"' in cmake, name
            assert str(project.resolve() / "csrc") in cmake or not (project / "csrc").is_dir()


def test_megablocks_capabilities_follow_upstreams_intersection(projects, monkeypatch):
    # Its list names 7.0, 7.2, 10.1 and 11.8, which CUDA 13 does not build: each target of the
    # toolkit gets the highest listed capability of its major at or below it.
    p = planned(projects["megablocks"], "cuda", monkeypatch)
    assert p.kernel_archs["megablocks"] == ["7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0",
                                            "12.0"]
    # and the build says so, one line for the kernel (upstream drops them silently)
    assert p.capability_notes == ("kernel megablocks: 7.0 dropped: nvcc 13.0 cannot compile it; "
                                  "7.2 dropped: nvcc 13.0 cannot compile it; 10.1 dropped: nvcc "
                                  "13.0 cannot compile it; 11.8 dropped: nvcc 13.0 cannot "
                                  "compile it",)


def test_activation_is_a_stable_abi_cuda_variant(projects, monkeypatch):
    p = planned(projects["activation"], "cuda", monkeypatch)
    assert p.name == "torch-stable-abi210-cu130-x86_64-linux"
    assert set(p.kernels) == {"activation"}


def test_build_all_plans_activation_once_per_toolkit(projects):
    """activation (`[torch.stable-abi] cuda = "2.10"`) over the default matrix, planned only:
    one stable-ABI variant per CUDA toolkit, built by the toolkit's newest torch, the other
    environments reported once as covered by it (or skipped: torch older than 2.10); CPU
    builds a regular variant per torch. No two environments write one folder."""
    from kbuild.matrix import buildall, matrix
    project = projects["activation"]
    mx = matrix.load(project)  # it has no pixi.toml: the builder's default matrix
    jobs, settled = buildall.plan_jobs(project, list(mx.envs))
    assert len({j.variant for j in jobs}) == len(jobs)
    assert sorted([j.spec.name for j in jobs] + [r.env for r in settled]) == sorted(
        e.name for e in mx.envs)  # every environment reported once
    cuda = [e for e in mx.envs if e.cuda]
    stable = {j.variant: j.spec.name for j in jobs if j.spec.cuda}
    newest = {e.compute: max((c for c in cuda if c.compute == e.compute
                              and c.release >= Version("2.10")), key=lambda c: c.release).name
              for e in cuda if e.release >= Version("2.10")}
    assert stable == {f"torch-stable-abi210-{cu}-x86_64-linux": name for cu, name in newest.items()}
    assert stable["torch-stable-abi210-cu130-x86_64-linux"] == "torch214-cu130"
    status = {r.env: r.status for r in settled}
    assert status["torch213-cu130"] == "covered" and status["torch29-cu130"] == "skipped"
    assert {status[e.name] for e in cuda if e.name not in stable.values()} == {"covered", "skipped"}
    cpu = sorted(j.variant for j in jobs if not j.spec.cuda)
    assert cpu == sorted(e.variant() for e in mx.envs if not e.cuda)  # regular, one per torch


@pytest.mark.slow
def test_runner_builds_relu_for_cpu_and_its_own_tests_pass(projects, work):
    """relu's CPU variant, built by run_projects.py, passes relu's own tests (get_kernel
    through LOCAL_KERNELS). Its work folder is at the same path in every run (compiler-cache
    hits)."""
    tmp_path = work
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "compat" / "run_projects.py"),
                           str(projects["relu"].parent), "relu", "--work", str(tmp_path),
                           "--check"], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (result,) = json.loads((tmp_path / "projects.json").read_text())["results"]
    assert result["build"] == "built" and "-cpu-" in result["variant"], result
    assert result["tests"] == "passed" and result["passed"] == 2 and result["check"] == "ok", result
    assert "| relu | built |" in (tmp_path / "projects.md").read_text()
