"""torch's nvcc flags reach CUDA sources."""

import os
from pathlib import Path

import torch
from kernels import get_local_kernel

PROJECT = Path(__file__).resolve().parents[1]
BACKEND = os.environ.get("KBUILD_COMPAT_BACKEND") or ("cuda" if torch.cuda.is_available() else "cpu")
DEVICE = "cuda" if BACKEND == "cuda" else "cpu"
kernel = get_local_kernel(PROJECT, backend=BACKEND)


def test_clamp_scale_against_torch():
    x = torch.linspace(-4, 4, 1000, device=DEVICE)
    torch.testing.assert_close(kernel.clamp_scale(x, 2.0, 3.0), torch.clamp(x * 2.0, max=3.0))
