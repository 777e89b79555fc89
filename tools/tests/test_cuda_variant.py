"""The CUDA variant compiles against torch 2.14.1 (cu130) and imports on this GPU-less machine;
built again from another checkout of the same commit (real compiles, no compiler cache), it is
the same bytes (for two capabilities: the multi-architecture path at a fifth of the nvcc time)."""

from __future__ import annotations

import json
import subprocess
import textwrap

import pytest

from kbuild.stages import pipeline
from kbuild.stages.check import check_variant
from test_reproducible import CHECKOUTS, build_uncached, clone, files, has_commit

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cuda_variant(tmp_path_factory, cuda_python):
    """Built from a clone of this checkout's commit (a copy of the tree when it has none), at
    the same path in every run (its compiles may come from the run's compiler cache)."""
    from kbuild_testing import copy_project, work_folder
    root = work_folder("cuda-variant", tmp_path_factory.mktemp("cuda"))
    project = clone(root / CHECKOUTS[0]) if has_commit() else copy_project(root / "img2gray")
    (result,) = pipeline.build(project, python=cuda_python)
    return result


REPRODUCED_CAPABILITIES = ["8.0", "9.0"]


def test_cuda_variant_is_reproducible(cuda_python, tmp_path):
    if not has_commit():
        pytest.skip("this checkout has no commit holding the project to clone")
    from kbuild_testing import work_folder
    root = work_folder("cuda-variant-twice", tmp_path / "first")
    (first,) = pipeline.build(clone(root / CHECKOUTS[0]), python=cuda_python,
                              local_capabilities=REPRODUCED_CAPABILITIES)
    again = build_uncached(clone(tmp_path / CHECKOUTS[1]), python=cuda_python,  # real compiles
                           local_capabilities=REPRODUCED_CAPABILITIES)
    meta = json.loads((again.path / "metadata.json").read_text())
    assert meta["backend"]["archs"] == REPRODUCED_CAPABILITIES
    assert again.kernel_id == first.kernel_id and "_dirty" not in again.kernel_id
    assert files(again.path) == files(first.path)


def test_cuda_variant_layout(cuda_variant):
    assert cuda_variant.variant == "torch214-cxx11-cu130-x86_64-linux"
    meta = json.loads((cuda_variant.path / "metadata.json").read_text())
    assert meta["backend"]["type"] == "cuda"
    assert meta["backend"]["archs"] == ["7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "10.3",
                                        "11.0", "12.0", "12.1+PTX"]
    assert meta["id"].startswith("_img2gray_cuda_")


def test_cuda_variant_passes_check_and_loads(cuda_variant, cuda_python):
    report = check_variant(cuda_variant.path, python=cuda_python)
    assert report.ok, report.problems
    assert report.loaded


def test_op_has_cuda_and_cpu_kernels(cuda_variant, cuda_python):
    code = textwrap.dedent(f"""
        import torch, kernels
        from pathlib import Path
        k = kernels.get_local_kernel(Path({str(cuda_variant.path)!r}), backend="cuda")
        name = k._ops.add_op_namespace_prefix("img2gray")
        has = torch._C._dispatch_has_kernel_for_dispatch_key
        print(torch.cuda.is_available(), has(name, "CUDA"), has(name, "CPU"))
        x = torch.randint(0, 256, (5, 6, 3), dtype=torch.uint8)
        ref = (x.float()[..., 0] * 0.21 + x.float()[..., 1] * 0.72 + x.float()[..., 2] * 0.07).to(torch.uint8)
        assert torch.equal(k.img2gray(x), ref)  # the CPU kernel ships in the CUDA variant too
    """)
    # No __pycache__ in the variant the other tests read.
    proc = subprocess.run([cuda_python, "-B", "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    available, has_cuda, has_cpu = proc.stdout.split()
    assert (has_cuda, has_cpu) == ("True", "True")


def test_cuda_so_needs_only_torch_and_cuda_libraries(cuda_variant):
    from kbuild.stages.check.binary import elf_dynamic
    needed, rpaths = elf_dynamic(cuda_variant.path / f"{cuda_variant.kernel_id}.abi3.so")
    assert rpaths == []
    assert "libcudart.so.13" in needed and "libc10_cuda.so" in needed
