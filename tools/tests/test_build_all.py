"""`kbuild build-all` realising environments from PyPI (torch 2.13.0 cpu, 2.14.1 cu130: wheels on
this machine's disk) from their locks, skipping unchanged variants, and surviving interrupts and
dead compilers."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from kbuild_testing import (REPO, complete_variants, compiler_pids, copy_project,
                            default_sigint, real_compiles_env, wait_for, work_folder)
from kbuild.matrix import envs, lockfile, matrix
from kbuild.stages.check import check_variant

ENVS = ["torch213-cpu", "torch214-cu130"]
CPU, CUDA = "torch213-cxx11-cpu-x86_64-linux", "torch214-cxx11-cu130-x86_64-linux"
# Realised environments are cached in the repository's .kbuild/ so reruns take seconds.
ENVS_DIR = REPO / ".kbuild" / "envs"




def project_copy(root: Path) -> Path:
    project = copy_project(root)
    shutil.copy2(REPO / "pixi.toml", project / "pixi.toml")
    shutil.copytree(REPO / "locks", project / "locks")  # the locks belong to the pixi.toml
    return project


def build_all(project: Path, *args: str, env: dict | None = None,
              timeout: float = 1500) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kbuild", "build-all", str(project), "--only", ",".join(ENVS),
         "--envs-dir", str(ENVS_DIR), *args], capture_output=True, text=True, timeout=timeout,
        env={**os.environ, **(env or {})})


def start_build_all(project: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    env = {**os.environ, **(env or real_compiles_env())}  # compilers to interrupt
    return subprocess.Popen(
        [sys.executable, "-m", "kbuild", "build-all", str(project), "--only", ",".join(ENVS),
         "--envs-dir", str(ENVS_DIR), "--json", str(project / "summary.json"), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        preexec_fn=default_sigint)





# -- fast ----------------------------------------------------------------------------------------

def test_wheel_flavour_from_resolution():
    assert envs.wheel_compute({"torch": "2.13.0+cpu"}) == "cpu"
    assert envs.wheel_compute({"torch": "2.7.1", "nvidia-cuda-runtime-cu12": "12.6.77"}) == "cu126"
    assert envs.wheel_compute({"torch": "2.14.1", "cuda-toolkit": "13.0.3.0"}) == "cu130"
    assert envs.wheel_compute({"torch": "2.7.1+cu128"}) == "cu128"
    assert envs.wheel_compute({"numpy": "2.0"}) is None


def test_unknown_environment_is_an_error(tmp_path):
    project = project_copy(tmp_path / "p")
    proc = subprocess.run([sys.executable, "-m", "kbuild", "build-all", str(project),
                           "--only", "torch99-cu999"], capture_output=True, text=True)
    assert proc.returncode == 2 and "matches no environment" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_unrealisable_environment_is_reported_not_built(tmp_path):
    """A CUDA 12 environment has no toolkit on PyPI: named explicitly, it fails with the reason."""
    project = project_copy(tmp_path / "p")
    proc = subprocess.run([sys.executable, "-m", "kbuild", "build-all", str(project), "--only",
                           "torch27-cu126", "--envs-dir", str(tmp_path / "envs"), "--via", "pypi",
                           "--json", str(tmp_path / "s.json")], capture_output=True, text=True)
    assert proc.returncode == 1 and (tmp_path / "s.json").is_file(), proc.stdout + proc.stderr
    (result,) = json.loads((tmp_path / "s.json").read_text())["results"]
    assert result["status"] == "failed" and "toolkit" in result["message"]
    assert not (project / "build").exists()


# -- slow: real environments and builds ----------------------------------------------------------

@pytest.fixture(scope="module")
def realised() -> dict[str, envs.Realised]:
    """The two environments, created once (about a minute) and then reused from .kbuild/envs."""
    mx = matrix.load(REPO)
    return {name: envs.realise(mx.get(name), ENVS_DIR) for name in ENVS}


@pytest.fixture(scope="module")
def built(tmp_path_factory, realised) -> tuple[Path, subprocess.CompletedProcess]:
    project = project_copy(work_folder("build-all", tmp_path_factory.mktemp("ba")) / "img2gray")
    proc = build_all(project, "--jobs", "2", "--locked", "--json", str(project / "summary.json"))
    return project, proc


@pytest.mark.slow
def test_build_all_builds_both_variants(built, realised):
    project, proc = built
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((project / "summary.json").read_text())
    assert summary["via"] == "pypi"
    assert {r["variant"]: r["status"] for r in summary["results"]} == {CPU: "built", CUDA: "built"}
    assert all(r["so_bytes"] > 0 for r in summary["results"])
    assert complete_variants(project / "build") == sorted([CPU, CUDA])
    assert CPU in proc.stdout and CUDA in proc.stdout  # the final table
    for variant, env in ((CPU, "torch213-cpu"), (CUDA, "torch214-cu130")):  # --locked: from locks
        meta = json.loads((project / "build" / variant / "metadata.json").read_text())
        assert meta["provenance"]["environment"]["lock"] == lockfile.read(
            REPO / "locks" / "linux-64" / f"pylock.{env}.toml").sha256


@pytest.mark.slow
def test_both_variants_pass_check_and_load(built, realised):
    project, _ = built
    for variant, env in ((CPU, "torch213-cpu"), (CUDA, "torch214-cu130")):
        report = check_variant(project / "build" / variant, python=str(realised[env].python))
        assert report.ok, (variant, report.problems)
        assert report.loaded, (variant, report.notes)


@pytest.mark.slow
def test_cpu_variant_computes_img2gray(built, realised):
    project, _ = built
    code = textwrap.dedent(f"""
        import sys, torch, kernels
        from pathlib import Path
        sys.path.insert(0, {str(REPO / "tests")!r})
        from reference import img2gray_reference
        k = kernels.get_local_kernel(Path({str(project)!r}), backend="cpu")
        assert k.__name__.startswith("_img2gray_cpu_"), k.__name__
        torch.manual_seed(0)
        for shape in [(1, 1, 3), (17, 33, 3), (256, 300, 3)]:
            image = torch.randint(0, 256, shape, dtype=torch.uint8)
            assert torch.equal(k.img2gray(image), img2gray_reference(image)), shape
        print("ok", torch.__version__)
    """)
    proc = subprocess.run([str(realised["torch213-cpu"].python), "-c", code], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["ok", "2.13.0+cpu"]


@pytest.mark.slow
def test_rerun_skips_unchanged_variants(built):
    project, _ = built
    before = {v: (project / "build" / v / "metadata.json").stat().st_mtime_ns for v in (CPU, CUDA)}
    start = time.monotonic()
    proc = build_all(project, "--json", str(project / "again.json"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert time.monotonic() - start < 60
    results = json.loads((project / "again.json").read_text())["results"]
    assert {r["status"] for r in results} == {"up to date"}
    after = {v: (project / "build" / v / "metadata.json").stat().st_mtime_ns for v in (CPU, CUDA)}
    assert before == after


@pytest.mark.slow
def test_sigint_leaves_complete_variants(tmp_path, realised):
    project = project_copy(tmp_path / "p")
    proc = start_build_all(project, "--jobs", "2")
    assert wait_for(lambda: compiler_pids(project)), "no compiler ever started"
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 130, stdout + stderr
    assert "Traceback" not in stderr
    assert not compiler_pids(project), "compilers outlived build-all"
    summary = json.loads((project / "summary.json").read_text())["results"]
    statuses = {r["env"]: r["status"] for r in summary}
    assert "interrupted" in statuses.values(), statuses
    assert all(r["message"].startswith("stopped by the interrupt") for r in summary
               if r["status"] == "interrupted"), summary  # never `env: interrupted: ` alone
    done = complete_variants(project / "build")
    assert set(done) <= {CPU, CUDA}
    # A second run finishes the job from whatever was left.
    again = build_all(project)
    assert again.returncode == 0, again.stdout + again.stderr
    assert complete_variants(project / "build") == sorted([CPU, CUDA])


@pytest.mark.slow
def test_killed_compiler_fails_one_environment_only(tmp_path, realised):
    project = project_copy(tmp_path / "p")
    # nvcc on the CUDA variant's kernel is killed (and the compiler cache running it): a define
    # of this run's own in CMake's CUDAFLAGS makes it a compile no cache holds. The C++ sources
    # may come from the run's cache; the CPU variant completes.
    proc = start_build_all(project, "--jobs", "2",
                           env={"CUDAFLAGS": f"-DKBUILD_TEST_RUN_{uuid.uuid4().hex}"})
    assert wait_for(lambda: compiler_pids(project, "img2gray.cu")), "no compiler ever started"
    killed = False
    while not killed and proc.poll() is None:
        for pid in compiler_pids(project, "img2gray.cu"):  # ccache and the nvcc it runs
            try:
                os.kill(pid, signal.SIGKILL)
                killed = True
            except ProcessLookupError:
                pass
    assert killed
    stdout, stderr = proc.communicate(timeout=900)
    assert proc.returncode == 1, stdout + stderr
    results = {r["variant"]: r for r in json.loads((project / "summary.json").read_text())["results"]}
    failed = [v for v, r in results.items() if r["status"] == "failed"]
    assert failed == [CUDA]
    bad, good = CUDA, CPU
    assert results[good]["status"] == "built"
    log = Path(results[bad]["log"])
    assert log.is_file() and str(log) in stderr  # the failure's log is kept and pointed to
    assert complete_variants(project / "build") == [good]
