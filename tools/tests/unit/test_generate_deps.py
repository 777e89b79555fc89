"""Dependencies (which CUTLASS release a name gives, refusals, opt-in substitution; the cache
itself is tested in test_cutlass_cache.py and test_cutlass_archives.py) and the framework a variant targets
(torch, torch stable ABI, refused tvm-ffi)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kbuild.stages.generate import cutlass
from kbuild.stages import frameworks
from kbuild.core import manifest as manifest_mod
from kbuild.core.errors import BuildError
from kbuild_testing import make_probe_project, plan_of

MANIFEST = Path("/p/build.toml")
# What upstream kernel-builder pins for each name (nix-builder/pkgs/cutlass/default.nix).
UPSTREAM = {"cutlass_2_10": "2.10.0", "cutlass_3_5": "3.5.1", "cutlass_3_6": "3.6.0",
            "cutlass_3_8": "3.8.0", "cutlass_3_9": "3.9.2", "cutlass_4_0": "4.0.0",
            "cutlass_4_4": "4.4.2", "cutlass_4_5": "4.5.2"}
PROVIDED = ("cutlass_2_10 (2.10.0), cutlass_3_5 (3.5.1), cutlass_3_6 (3.6.0), cutlass_3_8 (3.8.0), "
            "cutlass_3_9 (3.9.2), cutlass_4_0 (4.0.0), cutlass_4_2 (4.2.0), cutlass_4_4 (4.4.2), "
            "cutlass_4_5 (4.5.2)")


@pytest.mark.parametrize("dep", [*UPSTREAM, "cutlass_4_2"])
def test_each_name_gives_its_release_never_substituted(dep):
    got = cutlass.resolve(dep, manifest=MANIFEST, key="k", substitute=True)
    assert got.release.version == {**UPSTREAM, "cutlass_4_2": "4.2.0"}[dep] and got.substitutes is None
    assert got.release is cutlass.CUTLASS[dep]


@pytest.mark.parametrize("dep, nearest", [("cutlass_4_1", "4.2.0"), ("cutlass_4_3", "4.4.2")])
def test_names_without_a_verified_release_are_refused_naming_the_key(dep, nearest, monkeypatch):
    monkeypatch.delenv(cutlass.SUBSTITUTE_VAR, raising=False)
    wanted = dep.removeprefix("cutlass_").replace("_", ".")
    with pytest.raises(BuildError) as e:
        cutlass.resolve(dep, manifest=MANIFEST, key="kernel.k.depends")
    assert f"{dep}: CUTLASS {wanted} is not provided" in e.value.message
    assert e.value.key == "kernel.k.depends" and e.value.file == MANIFEST
    assert f"use one that is provided: {PROVIDED}" in e.value.hint
    assert f"--cutlass-substitute ({cutlass.SUBSTITUTE_VAR}=1) to use CUTLASS {nearest}" in e.value.hint


@pytest.mark.parametrize("dep, message", [
    ("sycl_tla", "sycl_tla is a dependency of the xpu backend"),
    ("cutlass_sycl", "cutlass_sycl is a dependency of the xpu backend"),
    ("metal-cpp", "metal-cpp is a dependency of the metal backend"),
    ("boost", "unknown dependency 'boost'"),
])
def test_other_dependencies_are_refused_naming_the_key(dep, message):
    with pytest.raises(BuildError) as e:
        cutlass.resolve(dep, manifest=MANIFEST, key="kernel.k.depends", substitute=True)
    assert message in e.value.message and e.value.key == "kernel.k.depends"
    assert f"torch, {PROVIDED}" in e.value.hint


@pytest.mark.parametrize("dep, nearest", [("cutlass_4_1", "4.2.0"), ("cutlass_4_3", "4.4.2"),
                                          ("cutlass_3_7", "3.8.0"), ("cutlass_1_0", "2.10.0")])
def test_substitution_is_the_nearest_newer_release_and_says_so(dep, nearest):
    got = cutlass.resolve(dep, manifest=MANIFEST, key="k", substitute=True)
    wanted = dep.removeprefix("cutlass_").replace("_", ".")
    assert got.release.version == nearest and got.substitutes == wanted
    assert f"CUTLASS {wanted} is not provided; using CUTLASS {nearest}" in got.warning()


def test_nothing_newer_than_the_newest_release_is_substituted():
    with pytest.raises(BuildError) as e:
        cutlass.resolve("cutlass_9_0", manifest=MANIFEST, key="k", substitute=True)
    assert "is not provided" in e.value.message
    assert "--cutlass-substitute" not in e.value.hint and PROVIDED in e.value.hint


def test_the_table_holds_tagged_releases_only():
    from kbuild.core.manifest.forms import KERNEL_DEPENDS
    assert set(cutlass.CUTLASS) <= set(KERNEL_DEPENDS)
    assert cutlass.available() == PROVIDED
    assert sorted(r.version for r in cutlass.RELEASES) == sorted({*UPSTREAM.values(), "4.2.0"})
    for r in cutlass.RELEASES:
        assert len(r.tree_sha256) == 64 and r.key == f"{r.version}-{r.tree_sha256[:16]}"
        if r.wheel:
            assert r.wheel.filename.startswith(r.wheel.package.replace("-", "_") + "-" + r.wheel.version + "-")
            assert r.wheel.prefix.endswith("/") and len(r.wheel.sha256) == 64
    assert not any(r.wheel and r.wheel.package == "tilelang" for r in cutlass.RELEASES)  # not 4.1.0
    assert cutlass.CUTLASS["cutlass_4_5"].wheel is None  # flashinfer's "4.5.0" is not the release


def gemm_project(tmp_path, depends):
    return make_probe_project(tmp_path / "p", files={"csrc/k.cpp": "", "csrc/j.cpp": ""},
                              kernels={"j": {"backend": "cpu", "depends": ["torch", "cutlass_3_8"],
                                             "src": ["csrc/j.cpp"]},
                                       "k": {"backend": "cpu", "depends": depends, "src": ["csrc/k.cpp"]}})


@pytest.fixture
def provisioned(monkeypatch, tmp_path):
    """cutlass.provision replaced: records the releases asked for, returns a folder per release."""
    asked = []

    def provision(release, root=None, warn=None):
        asked.append(release.key)
        return tmp_path / "cache" / release.key

    monkeypatch.setattr(cutlass, "provision", provision)
    return asked


def test_every_refusal_comes_before_any_download(tmp_path, provisioned, monkeypatch):
    monkeypatch.delenv(cutlass.SUBSTITUTE_VAR, raising=False)
    with pytest.raises(BuildError, match="CUTLASS 4.3 is not provided"):
        cutlass.kernel_includes(plan_of(gemm_project(tmp_path, ["cutlass_4_3"])))
    assert provisioned == []


def test_substitution_is_opt_in_warned_and_recorded(tmp_path, provisioned, monkeypatch):
    plan = plan_of(gemm_project(tmp_path, ["cutlass_4_3", "cutlass_3_8"]))
    monkeypatch.setenv(cutlass.SUBSTITUTE_VAR, "1")
    monkeypatch.setenv("KBUILD_CACHE_DIR", str(tmp_path / "nothing-cached"))
    warnings = []
    includes, roots = cutlass.kernel_includes(plan, warn=warnings.append)
    sub, exact = cutlass.CUTLASS["cutlass_4_4"], cutlass.CUTLASS["cutlass_3_8"]
    assert includes["k"] == [str(tmp_path / "cache" / sub.key / "include"),
                             str(tmp_path / "cache" / sub.key / "tools" / "util" / "include"),
                             str(tmp_path / "cache" / exact.key / "include"),
                             str(tmp_path / "cache" / exact.key / "tools" / "util" / "include")]
    assert roots == sorted(str(tmp_path / "cache" / r.key) for r in (sub, exact))
    assert provisioned == [exact.key, sub.key]  # each release once
    assert len(warnings) == 1 and "cutlass_4_3: CUTLASS 4.3 is not provided; using CUTLASS 4.4.2" in warnings[0]
    record = {p["dependency"]: p for p in cutlass.provenance(plan)}
    assert record["cutlass_4_3"] == {"dependency": "cutlass_4_3", "cutlass": "4.4.2", "tag": "v4.4.2",
                                     "tree_sha256": sub.tree_sha256, "generated": None,
                                     "substitutes": "4.3"}  # no source: nothing was cached
    assert record["cutlass_3_8"]["substitutes"] is None and set(record) == {"cutlass_4_3", "cutlass_3_8"}
    monkeypatch.setenv(cutlass.SUBSTITUTE_VAR, "0")
    with pytest.raises(BuildError):
        cutlass.provenance(plan)


def test_kernels_outside_the_variant_are_not_provisioned(tmp_path, provisioned):
    project = make_probe_project(tmp_path / "p", files={"csrc/k.cu": ""}, backends=("cpu", "cuda"),
                           kernels={"gpu": {"backend": "cuda", "depends": ["cutlass_3_9"],
                                            "src": ["csrc/k.cu"]}})
    assert cutlass.kernel_includes(plan_of(project)) == ({}, []) and provisioned == []


# --- frameworks -------------------------------------------------------------------------------

def test_stable_abi_builds_a_stable_abi_variant(tmp_path):
    plan = frameworks.apply(plan_of(make_probe_project(tmp_path / "p", torch_extra={"stable-abi": "2.9"})))
    assert plan.name == "torch-stable-abi29-cpu-x86_64-linux"
    assert plan.stable_abi == (2, 9) and plan.variant.framework == "torch-stable-abi"
    assert plan.kernel_id == "_probe_cpu_abc1234"


def test_stable_abi_per_backend(tmp_path):
    project = make_probe_project(tmp_path / "p", torch_extra={"stable-abi": {"cuda": "2.10"}})
    assert frameworks.apply(plan_of(project)).name == "torch213-cxx11-cpu-x86_64-linux"
    manifest = manifest_mod.load(project)
    assert frameworks.stable_abi_version(manifest, "cuda", project) == (2, 10)


@pytest.mark.parametrize("value, message", [("2.14", "older than the stable-ABI version 2.14"),
                                            ("2.8", "no stable ABI before 2.9"),
                                            ("two", "two")])
def test_stable_abi_refusals(tmp_path, value, message):
    with pytest.raises(BuildError) as e:  # a malformed version is refused by the manifest
        frameworks.apply(plan_of(make_probe_project(tmp_path / "p", torch_extra={"stable-abi": value})))
    assert message in e.value.message and e.value.key == "torch.stable-abi"


def test_tvm_ffi_is_refused_by_name(tmp_path):
    project = make_probe_project(tmp_path / "p")
    manifest = manifest_mod.load(project)
    manifest = manifest.model_copy(update={"torch": None, "tvm_ffi": {"src": ["x.cpp"]}})
    with pytest.raises(BuildError) as e:
        frameworks.refuse_unbuildable(manifest, project)
    assert e.value.key == "tvm-ffi"
    frameworks.refuse_unbuildable(manifest_mod.load(project), project)  # a torch project passes
    assert dataclasses.is_dataclass(plan_of(project))
