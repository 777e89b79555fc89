"""Names this builder accepts that upstream's kernel-builder rejects: one warning line each,
naming the file and the key and what upstream accepts; the manifest still loads."""

from __future__ import annotations

from kbuild.core import manifest
from kbuild.core.manifest.upstream import UPSTREAM_DEPENDS
from kbuild_testing import BINDING, TORCH, kernel, make_project


def loaded(tmp_path, body: str, files=(), backends: str = '["cpu", "cuda"]'
           ) -> tuple[manifest.Manifest, list[str]]:
    root = make_project(tmp_path, TORCH + body, files=BINDING + tuple(files), backends=backends)
    lines: list[str] = []
    return manifest.load(root, warn=lines.append), lines


def test_dependencies_upstream_rejects_are_warned(tmp_path):
    body = (kernel("gemm", "cuda", "csrc/gemm.cu").replace("depends = []",
                                                          'depends = ["torch", "cutlass_4_1"]')
            + kernel("old", "cuda", "csrc/old.cu").replace(
                "depends = []", 'depends = ["cutlass_4_2", "cutlass_4_3"]')
            + kernel("sycl", "xpu", "csrc/sycl.cpp").replace("depends = []",
                                                            'depends = ["cutlass_sycl"]'))
    m, lines = loaded(tmp_path, body, ("csrc/gemm.cu", "csrc/old.cu", "csrc/sycl.cpp"),
                      backends='["cuda", "xpu"]')
    assert m.kernel["gemm"].depends == ["torch", "cutlass_4_1"]  # still accepted here
    assert len(lines) == 4 and all("\n" not in ln for ln in lines)
    path = str(tmp_path / "build.toml")
    first = lines[0]
    assert first.startswith(f"{path}: kernel.gemm.depends: upstream's kernel-builder rejects "
                            "`cutlass_4_1` (it accepts ")
    assert all(name in first for name in UPSTREAM_DEPENDS)
    assert [ln.split(": ")[1] for ln in lines[1:3]] == ["kernel.old.depends"] * 2
    assert "`cutlass_sycl` (it names this one `sycl_tla`)" in lines[3]


def test_a_kernels_cuda_maxver_is_warned(tmp_path):
    body = kernel("k", "cuda", "csrc/k.cu", extra='cuda-minver = "12.8"\ncuda-maxver = "12.9"\n')
    m, lines = loaded(tmp_path, body, ("csrc/k.cu",))
    assert m.kernel["k"].cuda_maxver == "12.9"
    (line,) = lines
    assert line.startswith(f"{tmp_path / 'build.toml'}: kernel.k.cuda-maxver: upstream's "
                           "kernel-builder rejects a kernel's cuda-maxver")
    assert "[general.cuda]" in line


def test_what_upstream_accepts_is_not_warned(tmp_path):
    body = (kernel("a", "cuda", "csrc/a.cu", extra='cuda-minver = "12.8"\n').replace(
        "depends = []", 'depends = ["torch", "cutlass_4_0", "cutlass_2_10", "cutlass_4_5"]')
            + '\n[general.cuda]\nmaxver = "13.0"\n')
    _, lines = loaded(tmp_path, body, ("csrc/a.cu",))
    assert lines == []
