"""The same commit built from two different directories gives byte-identical variant folders.
The second build compiles for real (no compiler cache); the first may take its objects from the
run's cache, whose entries are real compiles of the same sources at the same path in an
earlier run. The CUDA variant's case is in test_cuda_variant.py, which checks the first of its
two builds."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kbuild_testing import REPO
from kbuild.stages import pipeline


CHECKOUTS = ("first-checkout", "second/deeper/checkout")


def build_uncached(project: Path, **kw):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KBUILD_COMPILER_CACHE", "none")
        (result,) = pipeline.build(project, **kw)
    return result


def has_commit() -> bool:
    return subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", "HEAD:build.toml"],
                          capture_output=True).returncode == 0


def clone(dst: Path) -> Path:
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(dst)], check=True)
    return dst


def files(variant: Path) -> dict[str, bytes]:
    return {p.relative_to(variant).as_posix(): p.read_bytes() for p in variant.rglob("*") if p.is_file()}


def test_cpu_variant_is_reproducible(work, tmp_path):
    if not has_commit():  # e.g. a copy of the tree without its history
        pytest.skip("this checkout has no commit holding the project to clone")
    first = clone(work / CHECKOUTS[0])
    (a,) = pipeline.build(first, backends=["cpu"])
    b = build_uncached(clone(tmp_path / CHECKOUTS[1]), backends=["cpu"])
    assert a.kernel_id == b.kernel_id and "_dirty" not in a.kernel_id
    meta_a, meta_b = (json.loads((r.path / "metadata.json").read_text()) for r in (a, b))
    assert meta_a["digest"] == meta_b["digest"]
    assert files(a.path) == files(b.path)
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    assert meta_a["provenance"]["kernel"] == {"commit": commit, "dirty": False}
    for path in (first, tmp_path / "second"):
        assert str(path).encode() not in (a.path / f"{a.kernel_id}.abi3.so").read_bytes()

