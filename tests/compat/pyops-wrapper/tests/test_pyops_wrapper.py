"""Ops registered through wrappers land in the build's namespace and pass opcheck."""

import json
import os
from pathlib import Path

import torch
from kernels import get_local_kernel

PROJECT = Path(__file__).resolve().parents[1]
BACKEND = os.environ.get("KBUILD_COMPAT_BACKEND") or ("cuda" if torch.cuda.is_available() else "cpu")
DEVICE = "cuda" if BACKEND == "cuda" else "cpu"
kernel = get_local_kernel(PROJECT, backend=BACKEND)


def test_ops_live_in_the_build_namespace():
    meta = json.loads((Path(kernel.__file__).parent / "metadata.json").read_text())
    ops = kernel._ops.ops
    assert ops.name == meta["id"]
    assert ops.scale.default.name() == f"{meta['id']}::scale"
    assert ops.scale_into.default.name() == f"{meta['id']}::scale_into"


def test_ops_compute():
    x = torch.arange(8, dtype=torch.float32, device=DEVICE)
    torch.testing.assert_close(kernel.scale(x, 2.5), x * 2.5)
    out = torch.empty_like(x)
    assert kernel.scale_into(x, -1.0, out) is out
    torch.testing.assert_close(out, -x)


def test_opcheck():
    x = torch.randn(4, 3, device=DEVICE)
    torch.library.opcheck(kernel._ops.ops.scale.default, (x, 0.5))
    torch.library.opcheck(kernel._ops.ops.scale_into.default, (x, 3.0, torch.empty_like(x)))
