"""upload's variant selection: which variants of a build folder go up, which are skipped and why,
and which folders are refused as a whole (before anything talks to a Hub). Noarch variants,
built for real (no compiler), in process."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kbuild.core import manifest
from kbuild.core.built import BuiltVariant
from kbuild.core.errors import BuildError
from kbuild.publish.upload import select_variants, version_files
from kbuild.stages import pipeline
from kbuild_testing import make_project


@pytest.fixture
def built(tmp_path) -> Path:
    project = make_project(tmp_path / "demo", "[torch-noarch]\n")
    (project / "benchmarks").mkdir()
    (project / "benchmarks" / "benchmark_demo.py").write_text("")
    pipeline.build(project)
    return project


def select(project: Path, **kw):
    warnings: list[str] = []
    chosen, skipped = select_variants(project, project / "build", manifest.load(project),
                                      load=False, log=lambda _: None, warn=warnings.append, **kw)
    return chosen, skipped, warnings


def edit_meta(variant: Path, **changes) -> None:
    meta = json.loads((variant / "metadata.json").read_text())
    meta.update(changes)
    (variant / "metadata.json").write_text(json.dumps(meta))


def test_every_checked_variant_is_chosen_as_a_built_variant(built):
    chosen, skipped, warnings = select(built, allow_dirty=False)
    assert [v.name for v in chosen] == ["torch-cpu", "torch-cuda"] and skipped == {}
    assert all(isinstance(v, BuiltVariant) and v.metadata.name == "demo" for v in chosen)
    files = version_files(built, chosen)
    assert sorted(files) == ["benchmarks/benchmark_demo.py",
                             *(f"build/{v}/{f}" for v in ("torch-cpu", "torch-cuda")
                               for f in ("__init__.py", "_ops.py", "metadata.json"))]


def test_a_variant_failing_check_is_skipped_with_its_problems(built):
    cuda = built / "build" / "torch-cuda"
    (cuda / "__init__.py").write_text("# edited after the build\n")
    (built / "build" / "torch-cpu" / "__pycache__").mkdir()  # bytecode never ships: not fatal
    (built / "build" / "torch-cpu" / "__pycache__" / "x.pyc").write_bytes(b"")
    chosen, skipped, warnings = select(built, allow_dirty=False)
    assert [v.name for v in chosen] == ["torch-cpu"]
    assert skipped == {"torch-cuda": ["digest: __init__.py has changed since the build"]}
    # (a warning about the builder's own checkout may follow, when it has uncommitted changes)
    assert warnings[0] == "skipping torch-cuda: digest: __init__.py has changed since the build"
    assert not [w for w in warnings[1:] if w.startswith("skipping")]
    assert not [p for p in version_files(built, chosen) if "__pycache__" in p]


def test_unreadable_metadata_is_skipped_not_raised(built):
    (built / "build" / "torch-cuda" / "metadata.json").write_text("{")
    chosen, skipped, _ = select(built, allow_dirty=False)
    assert [v.name for v in chosen] == ["torch-cpu"] and list(skipped) == ["torch-cuda"]
    assert skipped["torch-cuda"][0].startswith("metadata.json is not valid JSON")


def test_nothing_chosen_is_an_error(built):
    for v in ("torch-cpu", "torch-cuda"):
        (built / "build" / v / "_ops.py").write_text("# edited\n")
    with pytest.raises(BuildError, match="no variant passed `kbuild check`"):
        select(built, allow_dirty=False)


def test_mixed_versions_other_kernels_and_wrong_version_are_refused(built):
    cuda = built / "build" / "torch-cuda"
    edit_meta(cuda, version=2)
    with pytest.raises(BuildError, match=r"mixes kernel versions \(torch-cpu: 1, torch-cuda: 2\)"):
        select(built, allow_dirty=False)
    edit_meta(cuda, version=1, name="other")
    with pytest.raises(BuildError, match="holds variants of demo, other, not of demo"):
        select(built, allow_dirty=False)
    shutil.rmtree(cuda)
    toml = built / "build.toml"
    toml.write_text(toml.read_text().replace("version = 1", "version = 4"))
    with pytest.raises(BuildError, match="the variants are version 1 but build.toml says 4") as info:
        select(built, allow_dirty=False)
    assert info.value.key == "general.version"


def test_a_variant_built_from_a_dirty_tree_needs_allow_dirty(built):
    cpu = built / "build" / "torch-cpu"
    meta = json.loads((cpu / "metadata.json").read_text())
    meta["provenance"]["kernel"] = {"commit": "a" * 40, "dirty": True}
    (cpu / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(BuildError, match="built from a tree with uncommitted changes") as info:
        select(built, allow_dirty=False)
    assert info.value.key == "provenance.kernel.dirty"
    chosen, _, _ = select(built, allow_dirty=True)
    assert [v.name for v in chosen] == ["torch-cpu", "torch-cuda"]


def test_a_variant_build_toml_no_longer_makes_is_skipped(built):
    """Issue 42: variants an earlier build left in build/ (here a backend taken out of
    build.toml) pass check, yet this build.toml does not make them: not uploaded."""
    toml = built / "build.toml"
    toml.write_text(toml.read_text().replace('backends = ["cpu", "cuda"]', 'backends = ["cpu"]'))
    chosen, skipped, warnings = select(built, allow_dirty=True)
    assert [v.name for v in chosen] == ["torch-cpu"]
    assert skipped == {"torch-cuda": ["not a variant of this build.toml: build.toml lists no cuda "
                                      "backend; an earlier build left it (`kbuild clean` removes it)"]}
    assert warnings[0].startswith("skipping torch-cuda: not a variant of this build.toml")


def test_a_torch_variant_left_after_switching_to_the_stable_abi_is_skipped(builds, tmp_path):
    """img2gray built as a regular torch variant, then switched to `[torch] stable-abi`: the
    torch213 variant still passes check, but this build.toml makes torch-stable-abi29 ones."""
    from kbuild_testing import fresh_copy
    project = fresh_copy(builds(), tmp_path / "img2gray")
    (variant,) = [d.name for d in (project / "build").iterdir()]
    assert variant.startswith("torch213-")
    chosen, skipped, _ = select(project, allow_dirty=True)
    assert [v.name for v in chosen] == [variant] and skipped == {}
    toml = project / "build.toml"
    toml.write_text(toml.read_text().replace("[torch]\n", '[torch]\nstable-abi = "2.9"\n', 1))
    warnings: list[str] = []
    with pytest.raises(BuildError, match="no variant passed"):
        select_variants(project, project / "build", manifest.load(project), allow_dirty=True,
                        load=False, log=lambda _: None, warn=warnings.append)
    assert warnings == [f"skipping {variant}: not a variant of this build.toml: build.toml builds "
                        'torch-stable-abi29 variants for cpu (torch.stable-abi = "2.9"); an '
                        "earlier build left it (`kbuild clean` removes it)"]


def test_a_release_build_split_by_kbuild_nvcc_split_is_not_published(built):
    """Issue 42: a split build's kernels may run slower; its provenance says so and check, so
    upload, refuses it (its load is still checked, as a local build's)."""
    from kbuild.stages.check import SPLIT_BUILD, check_variant
    cuda = built / "build" / "torch-cuda"
    meta = json.loads((cuda / "metadata.json").read_text())
    meta["provenance"]["split-compile"] = {"parts": 4}
    (cuda / "metadata.json").write_text(json.dumps(meta))
    report = check_variant(cuda, load=False)
    assert [p.code for p in report.problems] == [SPLIT_BUILD]
    assert "compiled split in 4 parts (KBUILD_NVCC_SPLIT)" in report.problems[0]
    assert "metadata.rejected" not in [p.code for p in report.problems]  # the loader takes it
    chosen, skipped, _ = select(built, allow_dirty=True)
    assert [v.name for v in chosen] == ["torch-cpu"] and list(skipped) == ["torch-cuda"]
