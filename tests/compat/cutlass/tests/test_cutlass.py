"""A CUTLASS-based CUDA kernel."""

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


def test_round_half_matches_torch_and_uses_cutlass_3_8():
    x = torch.randn(1000, device=DEVICE) * 1000
    y, version = kernel.round_half(x)
    torch.testing.assert_close(y, x.half().float(), rtol=0, atol=0)
    assert version // 100 == 308
