"""A CUDA torch environment for tests, realised from PyPI and cached under .kbuild/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CUDA_TORCH = "torch==2.14.1"
KERNELS = "kernels==0.17.2"


def ensure_cuda_env(root: Path) -> Path:
    """Returns the python of `.kbuild/test-envs/torch214-cu130`, creating it when missing."""
    env = root / ".kbuild" / "test-envs" / "torch214-cu130"
    python = env / "bin" / "python"
    stamp = env / ".complete"
    wanted = f"{CUDA_TORCH} {KERNELS}"
    if stamp.is_file() and stamp.read_text() == wanted:
        return python
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(env)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    CUDA_TORCH, KERNELS], check=True)
    stamp.write_text(wanted)
    return python
