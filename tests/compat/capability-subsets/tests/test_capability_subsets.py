"""Capability subsets per kernel."""

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


def test_metadata_declares_the_union():
    _, meta = variant_meta()
    assert meta["backend"]["archs"] == ["8.0", "8.6+PTX", "9.0a"]


def test_hopper_kernel_runs_on_capability_9_0_only():
    x = torch.arange(10, dtype=torch.float32, device=DEVICE)
    y = kernel.scale_hopper(x, 3.0)
    if torch.cuda.get_device_capability() == (9, 0):
        torch.testing.assert_close(y, x * 3.0)
    else:
        assert y is None
