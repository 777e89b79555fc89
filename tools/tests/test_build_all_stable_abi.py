"""`build-all` of a stable-ABI project (upstream's relu-torch-stable-abi pattern,
`[torch.stable-abi] cpu = "2.11"`) over two CPU torch environments: the variant is built once,
by the newest torch, and the other environment is reported as covered by it; `check` and the
upload selection take the variant. Planning alone is tested in-process (a noarch project, a
backend the project does not list)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kbuild_testing import BINDING, REPO, TORCH, kernel, make_project, work_folder
from kbuild.core import manifest as manifest_mod
from kbuild.matrix import buildall, matrix
from kbuild.publish.upload import select_variants

ENVS = ["torch211-cpu", "torch213-cpu"]  # only the newest is realised (a wheel on this disk)
STABLE = "torch-stable-abi211-cpu-x86_64-linux"
ENVS_DIR = REPO / ".kbuild" / "envs"


def stable_project(root: Path) -> Path:
    """tests/compat/stable-abi with relu-torch-stable-abi's table: `cpu = "2.11"`."""
    project = root / "stable"
    shutil.copytree(REPO / "tests" / "compat" / "stable-abi", project,
                    ignore=shutil.ignore_patterns("__pycache__", "build", ".kbuild"))
    toml = project / "build.toml"
    toml.write_text(toml.read_text().replace('stable-abi = "2.9"\n', "")
                    + '\n[torch.stable-abi]\ncpu = "2.11"\n')
    shutil.copy2(REPO / "pixi.toml", project / "pixi.toml")
    shutil.copytree(REPO / "locks", project / "locks")
    return project


def build_all(project: Path, summary: str) -> tuple[subprocess.CompletedProcess, dict]:
    proc = subprocess.run(
        [sys.executable, "-m", "kbuild", "build-all", str(project), "--only", ",".join(ENVS),
         "--envs-dir", str(ENVS_DIR), "--via", "pypi", "--json", str(project / summary)],
        capture_output=True, text=True, timeout=1500, env=dict(os.environ))
    results = json.loads((project / summary).read_text())["results"] \
        if (project / summary).is_file() else []
    return proc, {r["env"]: r for r in results}


def test_stable_abi_plan_one_job_per_variant(tmp_path):
    project = stable_project(tmp_path)
    specs = matrix.load(project).select(["torch29-cpu,torch211-cpu,torch213-cpu,torch214-cu130"])
    jobs, settled = buildall.plan_jobs(project, specs)
    assert [(j.spec.name, j.variant, j.covers) for j in jobs] == [
        ("torch213-cpu", STABLE, ("torch211-cpu",))]
    got = {r.env: (r.variant, r.status) for r in settled}
    assert got == {"torch29-cpu": ("-", "skipped"),  # torch 2.9 < the stable-ABI version 2.11
                   "torch211-cpu": (STABLE, "covered"),
                   "torch214-cu130": ("-", "skipped")}  # the project lists cpu only
    # an environment named on the command line that builds nothing fails instead
    _, settled = buildall.plan_jobs(project, specs, strict=("torch214-cu130",))
    assert {r.env: r.status for r in settled}["torch214-cu130"] == "failed"


def test_noarch_plan_builds_once_per_backend(tmp_path):
    root = make_project(tmp_path, '[torch-noarch]\n', backends='["cpu"]')
    (root / "pixi.toml").symlink_to(REPO / "pixi.toml")
    specs = matrix.load(root).select(["torch213-cpu,torch214-cpu"])
    jobs, settled = buildall.plan_jobs(root, specs)
    assert [(j.spec.name, j.variant) for j in jobs] == [("torch214-cpu", "torch-cpu")]
    assert [(r.env, r.status) for r in settled] == [("torch213-cpu", "covered")]


def test_regular_projects_build_every_environment(tmp_path):
    root = make_project(tmp_path, TORCH + kernel("k", "cpu", "csrc/k.cpp"),
                        files=BINDING + ("csrc/k.cpp",))
    (root / "pixi.toml").symlink_to(REPO / "pixi.toml")
    specs = matrix.load(root).select(["torch213-cpu,torch214-cpu"])
    jobs, settled = buildall.plan_jobs(root, specs)
    assert [j.variant for j in jobs] == [s.variant() for s in specs] and settled == []


@pytest.mark.slow
def test_build_all_builds_a_stable_abi_variant_once(tmp_path_factory):
    project = stable_project(work_folder("build-all-stable", tmp_path_factory.mktemp("sa")))
    proc, results = build_all(project, "first.json")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert {e: (r["variant"], r["status"]) for e, r in results.items()} == {
        "torch213-cpu": (STABLE, "built"), "torch211-cpu": (STABLE, "covered")}
    assert "torch213-cpu" in results["torch211-cpu"]["message"]
    assert "failed" not in proc.stdout and "produced no" not in proc.stdout + proc.stderr
    assert sorted(p.name for p in (project / "build").iterdir()) == [STABLE]
    # `check` and the upload's selection take the stable-ABI variant
    check = subprocess.run([sys.executable, "-m", "kbuild", "check", str(project), "--python",
                            str(ENVS_DIR / "torch213-cpu" / "bin" / "python")],
                           capture_output=True, text=True, timeout=600)
    assert check.returncode == 0 and STABLE in check.stdout, check.stdout + check.stderr
    chosen, skipped = select_variants(project, project / "build", manifest_mod.load(project),
                                      allow_dirty=True, load=False)
    assert [v.path.name for v in chosen] == [STABLE] and skipped == {}
    # unchanged: the variant is up to date (its fingerprint is kept under its real name)
    proc, again = build_all(project, "second.json")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert {e: r["status"] for e, r in again.items()} == {"torch213-cpu": "up to date",
                                                          "torch211-cpu": "covered"}
