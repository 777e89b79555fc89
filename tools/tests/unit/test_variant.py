"""The one variant-name model: parse and print agree with the `kernels` loader, and every user
(planner, matrix, check, to-wheel) names variants through it."""

from __future__ import annotations

from pathlib import Path

import pytest
from kernels.variants import parse_variant

from kbuild.core.built import BuiltVariant
from kbuild.core.metadata import BackendInfo, VariantMetadata
from kbuild.stages.check import layout_problems
from kbuild.stages.plan import variant_of
from kbuild.stages.torch_install import TorchInstall
from kbuild.core.variant import Variant, VariantError
from kbuild.matrix.matrix import EnvSpec
from kbuild.publish.wheel import wheel_tags

NAMES = [
    "torch213-cxx11-cu130-x86_64-linux",
    "torch27-cxx11-cu126-aarch64-linux",
    "torch213-cxx11-cpu-x86_64-linux",
    "torch28-cxx11-rocm64-x86_64-linux",
    "torch29-cxx11-xpu20252-x86_64-linux",
    "torch29-cpu-aarch64-darwin",
    "torch210-metal-aarch64-darwin",
    "torch213-cu130-x86_64-windows",
    "torch-stable-abi29-cu130-x86_64-linux",
    "tvm-ffi01-cu128-x86_64-linux",
    "torch-cuda",
    "torch-cpu",
    "torch-universal",
]


@pytest.mark.parametrize("name", NAMES)
def test_round_trip_matches_the_kernels_loader(name):
    ours = Variant.parse(name)
    assert ours.name == name == parse_variant(name).variant_str
    assert Variant.parse(ours.name) == ours


def test_fields():
    v = Variant.parse("torch213-cxx11-cu130-x86_64-linux")
    assert (v.framework, v.version, v.cxx11, v.backend, v.backend_version, v.cpu, v.os) == (
        "torch", (2, 13), True, "cuda", (13, 0), "x86_64", "linux")
    assert v.compute == "cu130" and v.release == "2.13" and not v.is_noarch
    assert Variant.parse("torch27-cxx11-cu126-x86_64-linux").backend_version == (12, 6)
    stable = Variant.parse("torch-stable-abi29-cpu-aarch64-linux")
    assert stable.framework == "torch-stable-abi" and stable.cxx11 is None
    noarch = Variant.parse("torch-cuda")
    assert noarch.is_noarch and noarch.backend == "cuda" and noarch.compute == "cuda"


@pytest.mark.parametrize("name, reason", [
    ("torch", "noarch"),
    ("torchX-cpu", "unknown framework"),
    ("foo-cpu-x86_64-linux", "unknown framework"),
    ("torch213-cxx11-cu130-x86_64", "<compute>-<cpu>-<os>"),
    ("torch213-cxx11-gpu-x86_64-linux", "unknown compute 'gpu'"),
    ("torch213-cxx11-cpu-riscv-linux", "unknown CPU 'riscv'"),
    ("torch213-cxx11-cpu-x86_64-beos", "unknown OS 'beos'"),
    ("torch-stable-abiX-cpu-x86_64-linux", "torch-stable-abi<MAJOR><MINOR>"),
])
def test_rejections_name_the_part(name, reason):
    with pytest.raises(VariantError) as info:
        Variant.parse(name)
    assert reason in info.value.reason and name in str(info.value)


def test_windows_and_macos_have_no_abi_tag():
    win = Variant.torch((2, 13), "cuda", backend_version=(13, 0), cpu="AMD64", os="windows")
    assert win.name == "torch213-cu130-x86_64-windows"
    mac = Variant.torch((2, 9), "cpu", cpu="arm64", os="darwin")
    assert mac.name == "torch29-cpu-aarch64-darwin"


def _torch(cuda: str | None) -> TorchInstall:
    return TorchInstall(python="python", python_version="3.11", python_include="/inc",
                        torch_version="2.13.0" + ("+cu130" if cuda else "+cpu"), torch_root="/t",
                        cuda=cuda, hip=None, cxx11_abi=True, cxx_std=17, machine="x86_64",
                        system="linux", site_packages="/s")


def test_planner_matrix_and_wheel_agree():
    planned = variant_of(_torch("13.0"), "cuda").name
    spec = EnvSpec(name="torch213-cu130", torch_version="2.13.0", torch_index=None, cuda="13.0",
                   platforms=("linux-64",))
    assert planned == spec.variant() == "torch213-cxx11-cu130-x86_64-linux"
    assert variant_of(_torch(None), "cpu").name == "torch213-cxx11-cpu-x86_64-linux"
    assert wheel_tags(planned).local == "torch213cu130"


def _built(folder: Path, backend: str) -> BuiltVariant:
    return BuiltVariant(folder, VariantMetadata(
        name="k", id="_k_x_1", version=1, license="mit", python_depends=[], kernel_depends=[],
        backend=BackendInfo(type=backend)))


def test_check_reads_names_through_the_model(tmp_path: Path):
    for name, backend in (("torch-stable-abi29-cu130-x86_64-linux", "cuda"),
                          ("torch210-metal-aarch64-darwin", "metal")):
        variant = tmp_path / name
        variant.mkdir()
        problems = layout_problems(_built(variant, backend))
        assert not [p for p in problems if p.code == "layout.backend"], problems
        other = [p for p in layout_problems(_built(variant, "cpu")) if p.code == "layout.backend"]
        assert other == [f"layout: folder {name} is a {backend} variant but metadata says 'cpu'"]
    bad = tmp_path / "torch213-cxx11-gpu-x86_64-linux"
    bad.mkdir()
    assert [p.code for p in layout_problems(_built(bad, "cpu"))] == ["layout.name"]
