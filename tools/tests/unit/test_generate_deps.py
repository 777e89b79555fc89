"""Dependencies (CUTLASS from the nvidia-cutlass wheels) and the framework a variant targets
(torch, torch stable ABI, refused tvm-ffi)."""

from __future__ import annotations

import dataclasses
import hashlib
import zipfile
from pathlib import Path

import pytest

from kbuild.stages import deps, frameworks
from kbuild.core import manifest as manifest_mod
from kbuild.core.errors import BuildError
from kbuild_testing import make_probe_project, plan_of

MANIFEST = Path("/p/build.toml")


@pytest.mark.parametrize("dep, message", [
    ("cutlass_3_9", "CUTLASS 3.9 has no nvidia-cutlass release on PyPI"),
    ("cutlass_2_10", "CUTLASS 2.10 has no nvidia-cutlass release on PyPI"),
    ("sycl_tla", "sycl_tla is a dependency of the xpu backend"),
    ("metal-cpp", "metal-cpp is a dependency of the metal backend"),
])
def test_unavailable_dependencies_are_refused_naming_the_key(dep, message):
    with pytest.raises(BuildError) as e:
        deps.release_for(dep, manifest=MANIFEST, key="kernel.k.depends")
    assert message in e.value.message and e.value.key == "kernel.k.depends"
    assert "cutlass_3_8 (3.8.0)" in e.value.hint


def test_each_cutlass_name_maps_to_its_minor_version():
    for name, release in deps.CUTLASS.items():
        assert release.version.startswith(name.removeprefix("cutlass_").replace("_", ".") + ".")


def fake_wheel(path: Path) -> bytes:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("cutlass_library/source/include/cutlass/cutlass.h", "// cutlass\n")
        zf.writestr("cutlass_library/source/include/cute/tensor.hpp", "// cute\n")
        zf.writestr("cutlass_library/source/tools/util/include/cutlass/util/helper.h", "// util\n")
        zf.writestr("cutlass_library/source/examples/00_basic/main.cu", "int main() {}\n")
        zf.writestr("cutlass_library/source/include/../../evil.h", "// escapes\n")
        zf.writestr("cutlass/__init__.py", "")
    return path.read_bytes()


def test_provision_unpacks_only_headers_once(tmp_path, monkeypatch):
    wheel = tmp_path / "w.whl"
    data = fake_wheel(wheel)
    release = deps.Release("9.9.0.0", hashlib.sha256(data).hexdigest())
    calls = []

    def download(rel, into):
        calls.append(rel.version)
        into.mkdir(parents=True)
        (into / rel.wheel).write_bytes(data)
        return into / rel.wheel

    monkeypatch.setattr(deps, "_download", download)
    tree = deps.provision(release, tmp_path / "cache")
    files = sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file())
    assert files == ["include/cute/tensor.hpp", "include/cutlass/cutlass.h",
                     "tools/util/include/cutlass/util/helper.h"]
    assert deps.provision(release, tmp_path / "cache") == tree and calls == ["9.9.0.0"]
    assert [p.name for p in (tmp_path / "cache" / "cutlass").iterdir()] == ["9.9.0.0"]


def test_a_wheel_with_the_wrong_hash_is_refused(tmp_path, monkeypatch):
    data = fake_wheel(tmp_path / "w.whl")
    release = deps.Release("9.9.0.0", "0" * 64)

    def fetch(args, **kw):
        into = Path(args[args.index("-d") + 1])
        into.mkdir(parents=True, exist_ok=True)
        (into / release.wheel).write_bytes(data)
        import subprocess
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(deps, "capture", fetch)
    with pytest.raises(BuildError, match="expected 0000"):
        deps.provision(release, tmp_path / "cache")
    assert list((tmp_path / "cache" / "cutlass").iterdir()) == []


def test_kernels_outside_the_variant_are_not_provisioned(tmp_path):
    project = make_probe_project(tmp_path / "p", files={"csrc/k.cu": ""}, backends=("cpu", "cuda"),
                           kernels={"gpu": {"backend": "cuda", "depends": ["cutlass_3_9"],
                                            "src": ["csrc/k.cu"]}})
    assert deps.kernel_includes(plan_of(project)) == ({}, [])


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
