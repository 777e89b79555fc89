"""Per-kernel cuda-minver."""

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


def test_new_kernel_only_with_cuda_13_2():
    _, meta = variant_meta()
    import re
    cuda = tuple(int(v) for v in re.search(r"-cu(\d+)(\d)-", Path(kernel.__file__).parent.name).groups())
    assert kernel.has_new_kernel() == (cuda >= (13, 2))
    if cuda < (13, 2):
        assert "10.0" not in meta["backend"]["archs"]
