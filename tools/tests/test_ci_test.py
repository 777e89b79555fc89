"""`kbuild test --ci`: kernel-builder's `ci-test` as kernels-community's CI runs it, on their
projects unchanged — it passes without tests/ (layer-norm), passes when no test is marked
`kernels_ci` (rotary: pytest's exit 5 counts as success), runs the marked tests of the best
variant for this machine (relu) and fails when they fail.

The projects are test input kept beside the checkout (../shared/corpus); without it these tests
skip, saying so. relu and rotary get their CPU variants built here (the suite's compiler cache
keeps a second run short)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from kbuild.stages import pipeline
from kbuild_testing import REPO, work_folder

pytestmark = pytest.mark.slow
CORPUS = REPO.parent / "shared" / "corpus"
SUBSET = CORPUS / "kernels-community-40d4194f-subset.tar.gz"
HEAVY = CORPUS / "kernels-community-40d4194f-heavy.tar.gz"
needs_corpus = pytest.mark.skipif(not (SUBSET.is_file() and HEAVY.is_file()), reason=(
    f"no kernels-community projects in {CORPUS} (test input kept beside the checkout, not in it)"))


def extract(tarball: Path, name: str, root: Path) -> Path:
    with tarfile.open(tarball) as tar:
        tar.extractall(root, members=[m for m in tar.getmembers()
                                      if m.name == name or m.name.startswith(f"{name}/")],
                       filter="data")
    return root / name


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, Path]:
    if not (SUBSET.is_file() and HEAVY.is_file()):
        pytest.skip(f"no kernels-community projects in {CORPUS}")
    root = work_folder("ci-test-corpus", tmp_path_factory.mktemp("corpus"))
    projects = {name: extract(SUBSET, name, root) for name in ("relu", "rotary")}
    projects["layer-norm"] = extract(HEAVY, "layer-norm", root)
    for name in ("relu", "rotary"):
        pipeline.build(projects[name], backends=["cpu"])
    return projects


def ci_test(project: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """`kbuild test --ci` in the project's folder, offline, as a CI step runs it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "KERNELS_"))}
    env.pop("LOCAL_KERNELS", None)
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    return subprocess.run([sys.executable, "-m", "kbuild", "test", "--ci", *args], cwd=project,
                          env=env, capture_output=True, text=True, timeout=600)


@needs_corpus
def test_a_project_without_tests_passes_saying_so(corpus, tmp_path):
    layer_norm = corpus["layer-norm"]
    assert not (layer_norm / "tests").exists() and not (layer_norm / "build").exists()
    proc = ci_test(layer_norm, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == (f"no tests/ folder in {layer_norm}: nothing to test, which passes "
                           "(as kernel-builder's ci-test)\n") and proc.stdout == ""


@needs_corpus
def test_a_project_marking_no_test_kernels_ci_passes_saying_why(corpus, tmp_path):
    proc = ci_test(corpus["rotary"], tmp_path)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "192 deselected" in proc.stdout  # every test collected, none marked kernels_ci
    assert "no test is marked kernels_ci (pytest exit 5): as in upstream's ci-test, that " \
           "counts as success" in proc.stderr


@needs_corpus
def test_the_marked_tests_run_and_a_failing_one_fails(corpus, tmp_path):
    relu = corpus["relu"]
    proc = ci_test(relu, tmp_path)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    variant = next(p for p in (relu / "build").iterdir() if p.is_dir())
    assert f"tests load build/{variant.name} (" in proc.stderr and "2 passed" in proc.stdout

    # The same build with its relu broken (the Python face that ships): the CI tests fail.
    broken = tmp_path / "build"
    shutil.copytree(relu / "build", broken)
    init = broken / variant.name / "__init__.py"
    init.write_text(init.read_text().replace("    ops.relu(out, x)\n", "    out.copy_(x)\n"))
    failed = ci_test(relu, tmp_path, "--build-dir", str(broken))
    assert failed.returncode == 1, (failed.stdout + failed.stderr)[-3000:]
    assert "FAILED tests/test_relu.py::test_relu - AssertionError" in failed.stdout
    assert f"tests load {broken / variant.name} (" in failed.stderr
