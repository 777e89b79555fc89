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


# --- in-process stage tests (tools/tests/unit) ---

def fake_torch(root: Path):
    """A TorchInstall that names paths under `root` (for generating, not compiling)."""
    from kbuild.build.torch_install import TorchInstall

    return TorchInstall(python="python", python_version="3.11", python_include=str(root / "py inc"),
                        torch_version="2.13.0", torch_root=str(root / "torch"), cuda=None, hip=None,
                        cxx11_abi=True, cxx_std=20, machine="x86_64", system="linux",
                        site_packages=str(root / "site"))


def make_project(root: Path, kernels: dict | None = None, torch_extra: dict | None = None,
                 files: dict[str, str] | None = None, backends: tuple[str, ...] = ("cpu",)) -> Path:
    """A small [torch] project `probe` (CPU) with the given kernels, [torch] keys and files."""
    import tomli_w

    root.mkdir(parents=True, exist_ok=True)
    data = {"general": {"name": "probe", "version": 1, "edition": 5, "license": "apache-2.0",
                        "backends": list(backends)},
            "torch": {"src": ["torch-ext/torch_binding.cpp"], **(torch_extra or {})},
            "kernel": kernels or {}}
    (root / "build.toml").write_text(tomli_w.dumps(data))
    for rel, text in {"torch-ext/torch_binding.cpp": "", "torch-ext/probe/__init__.py": "",
                      **(files or {})}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def cpu_kernel(src: list[str], **extra) -> dict:
    return {"backend": "cpu", "depends": [], "src": src, **extra}


def plan_of(project: Path, name: str = "torch213-cxx11-cpu-x86_64-linux"):
    """The CPU plan of `project` against fake_torch (no interpreter inspected)."""
    from kbuild.build.plan import VariantPlan
    from kbuild.core import manifest as manifest_mod

    manifest = manifest_mod.load(project)
    return VariantPlan(project=project.resolve(), manifest=manifest, backend="cpu",
                       torch=fake_torch(project.parent), name=name, uid="abc1234", git=None,
                       kernels=manifest.kernels_for("cpu"))
