"""A source shared by two kernels of one backend."""

import os
from pathlib import Path

import torch
from kernels import get_local_kernel

PROJECT = Path(__file__).resolve().parents[1]
BACKEND = os.environ.get("KBUILD_COMPAT_BACKEND") or ("cuda" if torch.cuda.is_available() else "cpu")
DEVICE = "cuda" if BACKEND == "cuda" else "cpu"
kernel = get_local_kernel(PROJECT, backend=BACKEND)


def test_scale():
    x = torch.arange(100, dtype=torch.float32, device=DEVICE)
    torch.testing.assert_close(kernel.scale(x, 4.0), x * 4.0)
