"""Helpers for the builder's tests: project copies and the CLI (imported by name, not via conftest)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROJECT_PARTS = ("build.toml", "csrc", "torch-ext")


def copy_project(dst: Path, src: Path = REPO) -> Path:
    """A copy of the img2gray project outside git (uid from a content hash)."""
    dst.mkdir(parents=True, exist_ok=True)
    for part in PROJECT_PARTS:
        if (src / part).is_dir():
            shutil.copytree(src / part, dst / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src / part, dst / part)
    return dst


def kbuild(*args: str, cwd: Path | None = None, env: dict | None = None,
           timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kbuild", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, env={**os.environ, **(env or {})},
                          timeout=timeout)




CUDA_ENV = "torch214-cu130"


def cuda_env():
    """The torch 2.14.1 + CUDA 13.0 environment of pixi.toml, realised from PyPI under .kbuild/envs."""
    from kbuild import envs, matrix
    return envs.realise(matrix.load(REPO).get(CUDA_ENV), REPO / ".kbuild" / "envs")
