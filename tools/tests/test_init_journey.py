"""A new author's journey on a fresh `kbuild init` project, end to end with real tools
(benchmarks/author_journey.py, which also times it): CPU build and the project's own tests,
a CUDA variant from the project's pixi.toml, check, wheels, upload to `kbuild hub serve`,
get_kernel. Then a wrong op schema in the same project: build, dev and check report torch's
registration error, naming the binding, and never abort."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from kbuild.stages import pipeline
from kbuild.cli import app
from kbuild.core.errors import BuildError
from kbuild_testing import CUDA_ENV, REPO, cuda_env, envs_folder, work_folder

pytestmark = pytest.mark.slow
CPU_VARIANT = "torch213-cxx11-cpu-x86_64-linux"
CUDA_VARIANT = "torch214-cxx11-cu130-x86_64-linux"


def journey_module():
    spec = importlib.util.spec_from_file_location("author_journey", REPO / "benchmarks" / "author_journey.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def journey(tmp_path_factory):
    """The whole journey once, with the CUDA environment realised (or reused) in the tests'
    shared environment folder, so the journey's build-all finds it."""
    cuda_env()
    mp = pytest.MonkeyPatch()
    mp.setenv("KBUILD_ENVS_DIR", str(envs_folder()))
    # The author's cache, kept between runs for its precompiled headers and configure seeds, but
    # with nothing remembered as loaded: every build, check and upload loads for real.
    cache = REPO / ".kbuild" / "journey-cache"
    for memo in ("loaded", "probed"):
        shutil.rmtree(cache / memo, ignore_errors=True)
    mp.setenv("KBUILD_CACHE_DIR", str(cache))
    try:
        workdir = work_folder("init-journey", tmp_path_factory.mktemp("journey"))
        yield journey_module().run(workdir, cuda_env=CUDA_ENV,
                                   log=lambda line: None)
    finally:
        mp.undo()


def output(journey, name: str) -> str:
    return next(s.output for s in journey.steps if s.name == name)


def test_init_build_and_the_projects_own_tests(journey):
    assert [s.name for s in journey.steps] == ["init", "build-cpu", "tests", "cuda-variant", "check",
                                               "wheel", "hub-serve", "upload", "get_kernel"]
    assert "created" in output(journey, "init")
    build = output(journey, "build-cpu")
    assert re.search(rf"^built {CPU_VARIANT} ", build, re.M)
    assert re.search(r"^\[(\d+)/\1\] linking _my_kernel_cpu_\w+\.abi3\.so", build, re.M)  # progress
    assert "checking that the extension loads" in build
    tests = output(journey, "tests")
    passed = re.search(r"(\d+) passed", tests)
    assert passed and int(passed.group(1)) >= 15 and "failed" not in tests and "error" not in tests


def test_cuda_variant_and_check(journey):
    results = json.loads((journey.workdir / "build-all.json").read_text())["results"]
    assert [(r["env"], r["variant"], r["status"]) for r in results] == [(CUDA_ENV, CUDA_VARIANT, "built")]
    build = journey.project / "build"
    assert sorted(p.name for p in build.iterdir()) == [CPU_VARIANT, CUDA_VARIANT]
    meta = json.loads((build / CUDA_VARIANT / "metadata.json").read_text())
    assert meta["backend"]["type"] == "cuda" and "9.0" in meta["backend"]["archs"]
    check = output(journey, "check")
    assert check.count(" ok ") == 2 and "FAILED" not in check
    flat = re.sub(r"[\s│┃]+", " ", check)  # the table may wrap the details column
    assert "loaded by kernels; ops: my_kernel" in flat


def test_wheels_upload_and_get_kernel(journey):
    wheels = sorted(p.name for p in (journey.workdir / "dist").iterdir())
    assert wheels == ["my_kernel-1.0.0+torch213cpu-cp39-abi3-manylinux_2_28_x86_64.whl",
                      "my_kernel-1.0.0+torch214cu130-cp39-abi3-manylinux_2_28_x86_64.whl"]
    upload = json.loads((journey.workdir / "upload.json").read_text())
    assert upload["status"] == "uploaded" and upload["repo_id"] == "your-org/my-kernel"
    assert upload["variants"] == [CPU_VARIANT, CUDA_VARIANT] and upload["readme"]["source"] == "CARD.md"
    assert "benchmarks/benchmark_my_kernel.py" in upload["added"]
    assert re.search(r"^OK _my_kernel_cpu_\w+$", output(journey, "get_kernel"), re.M)


def test_wrong_schema_is_torchs_message_in_build_dev_and_check(journey):
    project = journey.project
    binding = project / "torch-ext" / "torch_binding.cpp"
    text = binding.read_text()
    binding.write_text(text.replace("(Tensor! out, Tensor x, float negative_slope)", "(Tensor! out, Tensor x)"))
    good = sorted((project / "build" / CPU_VARIANT).iterdir())
    reason = "The number of arguments is different. 2 vs 3."

    proc = subprocess.run([sys.executable, "-m", "kbuild", "build"], cwd=project,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"error: {binding}:" in proc.stderr and "the built extension does not load" in proc.stderr
    assert "Inferred operator schema" in proc.stderr and reason in proc.stderr
    assert "Fatal Python error" not in proc.stderr and "frame #" not in proc.stderr
    assert "Traceback" not in proc.stderr
    assert sorted((project / "build" / CPU_VARIANT).iterdir()) == good  # build/ untouched

    result = CliRunner().invoke(app, ["dev", str(project)])
    assert isinstance(result.exception, BuildError) and reason in str(result.exception)

    # A broken variant that reached build/ (e.g. built before this check existed): check says why.
    pipeline.build(project, backends=["cpu"], verify=False)
    result = CliRunner().invoke(app, ["check", str(project)])
    assert result.exit_code == 1
    assert "Inferred operator schema" in result.output and "probe crashed" not in result.output
    assert "2 vs 3." in result.output
