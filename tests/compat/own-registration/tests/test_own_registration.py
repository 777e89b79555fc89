"""A project with its own registration.h."""

import json
import os
from pathlib import Path

import torch
from kernels import get_local_kernel

PROJECT = Path(__file__).resolve().parents[1]
BACKEND = os.environ.get("KBUILD_COMPAT_BACKEND") or ("cuda" if torch.cuda.is_available() else "cpu")
DEVICE = "cuda" if BACKEND == "cuda" else "cpu"
kernel = get_local_kernel(PROJECT, backend=BACKEND)


def variant_meta():
    variant = Path(kernel.__file__).parent
    return variant, json.loads((variant / "metadata.json").read_text())


def test_ops_live_in_the_build_namespace():
    _, meta = variant_meta()
    assert kernel._ops.ops.name == meta["id"]
    assert kernel._ops.add_op_namespace_prefix("x") == meta["id"] + "::x"


def test_scale():
    x = torch.arange(10, dtype=torch.float32, device=DEVICE)
    torch.testing.assert_close(kernel.scale(x, 2.5), x * 2.5)


def test_the_compiler_saw_the_real_id():
    _, meta = variant_meta()
    assert kernel.namespace_name() == meta["id"]


def test_pyext_decides_which_data_files_ship():
    variant, _ = variant_meta()
    assert kernel.config() == {"factor": 2.5}
    assert not (variant / "NOTES.md").exists()
