"""The compatibility corpus (tests/compat/): kernel-builder-style projects, each built (or
refused) as its expected.toml says.

- Refusals run in-process: a BuildError naming the key (or file) and the reason, and build/
  untouched. One refusal also goes through the CLI (exit 2, one message, no traceback).
- CPU builds share one fixture (two at a time), then every built project's own tests run in one
  pytest process, with the real `kernels` loader: the kernels load side by side.
- CUDA builds (compiled against the torch 2.14.1 cu130 environment, a few archs each) are
  marked slow; tests/compat/run_gpu.sh builds and tests them on a GPU.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kbuild_testing import REPO, kbuild, work_folder
from kbuild.stages.check import binary
from kbuild.stages import pipeline
from kbuild.stages.check import check_variant
from kbuild.core.errors import BuildError

CORPUS = REPO / "tests" / "compat"
# Every copy lives under a folder whose name CMake and the shell would expand if they were given
# the chance: the builds below show that paths reach them as data.
ODD_FOLDER = 'c $HOME ${HOME} $ENV{PATH} it\'s "q"'


@dataclass(frozen=True)
class Case:
    project: str
    backend: str
    outcome: str
    cuda: bool = False
    key: str | None = None
    file: str | None = None
    message: str | None = None
    variant: str | None = None
    archs: list[str] | None = None
    shipped: list[str] | None = None
    absent: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.project}-{self.backend}"

    def param(self):
        marks = []
        if self.cuda and self.outcome == "builds":
            marks.append(pytest.mark.slow)
        return pytest.param(self, id=self.id, marks=marks)


def load_cases() -> list[Case]:
    cases = []
    for expected in sorted(CORPUS.glob("*/expected.toml")):
        for spec in tomllib.loads(expected.read_text())["case"]:
            cases.append(Case(project=expected.parent.name, **spec))
    return cases


CASES = load_cases()


def cases(outcome: str, cuda: bool) -> list:
    return [c.param() for c in CASES if c.outcome == outcome and c.cuda == cuda]


def copy(project: str, dest: Path, odd: bool = True) -> Path:
    """A copy of a corpus project; under ODD_FOLDER unless CUDA compiles it (nvcc hands paths
    to a shell, so CUDA builds refuse such folders: see test_generate_cmake)."""
    target = dest / (ODD_FOLDER if odd else "corpus") / project
    shutil.copytree(CORPUS / project, target, symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__", "build", ".kbuild"))
    return target


def test_corpus_covers_every_pattern():
    projects = {c.project for c in CASES}
    assert len(projects) >= 15
    assert {c.outcome for c in CASES} == {"builds", "refused"}


# --- refusals --------------------------------------------------------------------------------

def assert_refused(case: Case, project: Path, python: str | None) -> None:
    build = project / "build"
    build.mkdir()
    (build / "keep.txt").write_text("untouched")
    with pytest.raises(BuildError) as info:
        pipeline.build(project, backends=[case.backend], python=python)
    err = info.value
    if case.key:
        assert err.key == case.key, str(err)
        assert Path(err.file) == project / "build.toml"
    if case.file:
        assert str(err.file) == str(project / case.file), str(err)
    assert case.message in str(err), str(err)
    assert sorted(p.name for p in build.iterdir()) == ["keep.txt"]
    for name in case.absent:
        assert not list(project.parent.rglob(name)), f"{name} was created: a value was executed"
    assert not (project / ".kbuild" / "staging").exists() or not any(
        (project / ".kbuild" / "staging").iterdir())


@pytest.mark.parametrize("case", cases("refused", cuda=False))
def test_refused(case, work):
    assert_refused(case, copy(case.project, work), None)


@pytest.mark.parametrize("case", cases("refused", cuda=True))
def test_refused_cuda(case, work, cuda_python):
    assert_refused(case, copy(case.project, work, odd=False), cuda_python)


def test_refusal_through_the_cli(tmp_path):
    project = copy("tvm-ffi", tmp_path)
    proc = kbuild("build", project)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith(f"error: {project / 'build.toml'}: key `tvm-ffi`: "), proc.stderr
    assert len(lines) == 2 and lines[1].lstrip().startswith("hint:")
    assert "Traceback" not in proc.stderr and not (project / "build").exists()


# --- CPU builds ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cpu_builds(tmp_path_factory):
    """Every CPU 'builds' case, built two at a time in copies: {case id: (project, result)}."""
    root = work_folder("compat-cpu-builds", tmp_path_factory.mktemp("compat"))
    todo = [c for c in CASES if c.outcome == "builds" and not c.cuda]

    def build(case: Case):
        project = copy(case.project, root)
        try:
            (result,) = pipeline.build(project, backends=[case.backend])
        except BuildError as e:
            return case.id, (project, e)
        return case.id, (project, result)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(build, todo))


def assert_built(case: Case, project: Path, result, python: str | None = None) -> None:
    assert not isinstance(result, BuildError), str(result)
    variant = result.path
    if case.variant:
        assert variant.name == case.variant
    report = check_variant(variant, python=python, load=python is not None)
    assert report.ok, report.problems
    meta = json.loads((variant / "metadata.json").read_text())
    if case.archs is not None:
        assert meta["backend"].get("archs") == case.archs
    if case.shipped is not None:
        files = sorted(p.relative_to(variant).as_posix() for p in variant.rglob("*")
                       if p.is_file() and p.name != "metadata.json" and p.suffix != ".so")
        assert files == sorted(case.shipped)
    for name in case.absent:
        assert not list(project.rglob(name)), f"{name} was created: a value was executed"


@pytest.mark.parametrize("case", cases("builds", cuda=False))
def test_builds(case, cpu_builds):
    project, result = cpu_builds[case.id]
    assert_built(case, project, result)


def test_built_kernels_pass_their_tests_side_by_side(cpu_builds):
    """Every CPU-built project's own tests, in one process: all kernels loaded at once."""
    dirs = [str(project / "tests") for project, result in cpu_builds.values()
            if not isinstance(result, BuildError) and (project / "tests").is_dir()]
    assert len(dirs) >= 4
    env = {**os.environ, "KBUILD_COMPAT_BACKEND": "cpu"}
    # --rootdir "." (pytest expands $VARS in a --rootdir it is given).
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--rootdir", ".", *dirs], cwd=Path(dirs[0]).parents[1],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert re.search(r"\b\d+ passed\b", proc.stdout)


# --- CUDA builds (slow) ----------------------------------------------------------------------

@pytest.mark.parametrize("case", cases("builds", cuda=True))
def test_builds_cuda(case, work, cuda_python):
    project = copy(case.project, work, odd=False)
    (result,) = pipeline.build(project, backends=[case.backend], python=cuda_python)
    assert_built(case, project, result, python=cuda_python)
    # The fat-binary check also catches a capability the binary does not hold.
    from kbuild.stages.check import code_problems
    so = next(result.path.glob("*.so"))
    assert code_problems(so, "cuda", case.archs + ["3.0"], stable=False) == [
        f"{so.name}: no code for capability 3.0 (the fat binary holds "
        + ", ".join(c.name for c in binary.cuda_code(so)) + ")"]
