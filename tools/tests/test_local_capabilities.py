"""A local build for a Hopper GPU (`--cuda-capabilities 9.0`, torch 2.14.1 + CUDA 13.0) of a
project with a Hopper kernel (9.0a) and a Blackwell kernel (10.0f) that share their host
dispatch and are both called by the binding (flash-mla's and sage-attention's patterns): the
Hopper kernel is compiled for 9.0a, the Blackwell one as PTX only so that the binding links,
the build says so in one line, and the variant loads and passes the checks for what it claims.
One real compile; the planning itself is tested in unit/test_plan_kernels.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from kbuild_testing import REPO, work_folder
from kbuild.stages.check import binary
from kbuild.stages.check import check_variant, probe_load

pytestmark = pytest.mark.slow
FIXTURE = REPO / "tools" / "tests" / "data" / "capability-local"
VARIANT = "torch214-cxx11-cu130-x86_64-linux"


@pytest.fixture(scope="module")
def built(tmp_path_factory, cuda_python):
    root = work_folder("capability-local", tmp_path_factory.mktemp("local"))
    project = root / "capability-local"
    if project.exists():
        shutil.rmtree(project / "build", ignore_errors=True)
    shutil.copytree(FIXTURE, project, dirs_exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "kbuild", "build", str(project), "--python",
                           cuda_python, "--cuda-capabilities", "9.0"],
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return project / "build" / VARIANT, proc


def test_the_build_says_what_it_did_with_the_blackwell_kernel(built):
    _, proc = built
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("warning: kernel ")]
    assert lines == ["warning: kernel scale_sm100: not compiled for 9.0 (it declares 10.0f); PTX "
                     "for 10.0f only, so that the binding links"]


def test_hopper_code_runs_blackwell_code_only_links(built):
    variant, _ = built
    (so,) = variant.glob("*.abi3.so")
    codes = {c.name + (" ptx" if c.ptx else "") for c in binary.cuda_code(so)}
    assert codes == {"sm_90a", "compute_100f ptx"}  # no ptxas run for sm_100f
    meta = json.loads((variant / "metadata.json").read_text())
    assert meta["backend"]["archs"] == ["9.0a"]  # what a 9.0 GPU runs, nothing more
    assert meta["provenance"]["local-build"] == {"cuda-capabilities": ["9.0"]}


def test_the_variant_loads_and_passes_the_checks_of_what_it_claims(built, cuda_python):
    """`check` finds nothing but the local-build mark (never published), and the load still
    runs: the variant loads through `kernels` with the ops of both kernels."""
    variant, _ = built
    report = check_variant(variant, python=cuda_python)
    assert [p.code for p in report.problems] == ["metadata.local-build"]
    assert report.loaded and any("loaded by kernels" in n for n in report.notes), report.notes
    meta = json.loads((variant / "metadata.json").read_text())
    loaded = probe_load(variant, cuda_python, meta["id"])
    assert loaded["loadable"], loaded
    assert {"scale_out", "scale_blackwell_out"} <= set(loaded["ops"])
