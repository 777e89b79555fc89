"""Helpers for the builder's tests: project copies and the CLI (imported by name, not via conftest)."""

from __future__ import annotations

import os
import signal
import shutil
import subprocess
import sys
import time
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
    from kbuild.matrix import envs, matrix
    return envs.realise(matrix.load(REPO).get(CUDA_ENV), REPO / ".kbuild" / "envs")


def default_sigint() -> None:
    """Children of a background shell start with SIGINT ignored; tests need the default."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def compiler_pids(project: Path, source: str = "") -> list[int]:
    """Compiler processes (host or CUDA) working on files of `project` (and on `source`)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(project) in cmd and source in cmd and any(
                t in cmd for t in ("cc1plus", "cicc", "ptxas", "nvcc ", " -c ")):
            pids.append(int(proc.name))
    return pids


def wait_for(predicate, timeout: float = 600.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def complete_variants(build: Path) -> list[str]:
    """The entries of build/, each asserted to be a complete variant (`check`, minus loading)."""
    from kbuild.build.check import check_variant
    if not build.exists():
        return []
    names = sorted(p.name for p in build.iterdir())
    for name in names:
        report = check_variant(build / name, load=False)
        assert report.ok, (name, report.problems)
    return names


def envs_folder() -> Path:
    """Where tests realise PyPI environments: $KBUILD_ENVS_DIR (shared between checkouts) or
    the repository's .kbuild/envs."""
    shared = os.environ.get("KBUILD_ENVS_DIR")
    return Path(shared).resolve() if shared else REPO / ".kbuild" / "envs"


def cuda_env_shared():
    """cuda_env(), realised in envs_folder()."""
    from kbuild.matrix import envs, matrix
    return envs.realise(matrix.load(REPO).get(CUDA_ENV), envs_folder())
