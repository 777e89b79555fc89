"""The same commit built from two different directories gives byte-identical variant folders
(real compiles, no compiler cache). The CUDA variant's case is in test_cuda_variant.py, which
checks the first of its two builds."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kbuild_testing import REPO
from kbuild.stages import pipeline


@pytest.fixture(autouse=True)
def real_compiles(monkeypatch):
    monkeypatch.setenv("KBUILD_COMPILER_CACHE", "none")


CHECKOUTS = ("first-checkout", "second/deeper/checkout")


def has_commit() -> bool:
    return subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", "HEAD:build.toml"],
                          capture_output=True).returncode == 0


def clone(dst: Path) -> Path:
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(dst)], check=True)
    return dst


def files(variant: Path) -> dict[str, bytes]:
    return {p.relative_to(variant).as_posix(): p.read_bytes() for p in variant.rglob("*") if p.is_file()}


def build_twice(tmp_path: Path, **kw):
    if not has_commit():  # e.g. a copy of the tree without its history
        pytest.skip("this checkout has no commit holding the project to clone")
    results = []
    for name in CHECKOUTS:
        (result,) = pipeline.build(clone(tmp_path / name), **kw)
        results.append(result)
    return results


def test_cpu_variant_is_reproducible(tmp_path):
    a, b = build_twice(tmp_path, backends=["cpu"])
    assert a.kernel_id == b.kernel_id and "_dirty" not in a.kernel_id
    meta_a, meta_b = (json.loads((r.path / "metadata.json").read_text()) for r in (a, b))
    assert meta_a["digest"] == meta_b["digest"]
    assert files(a.path) == files(b.path)
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    assert meta_a["provenance"]["kernel"] == {"commit": commit, "dirty": False}
    for path in (tmp_path / "first-checkout", tmp_path / "second"):
        assert str(path).encode() not in (a.path / f"{a.kernel_id}.abi3.so").read_bytes()

