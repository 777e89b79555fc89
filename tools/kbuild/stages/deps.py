"""Kernel dependencies (`depends = [...]`): CUTLASS headers from NVIDIA's `nvidia-cutlass` wheels.

A dependency name asks for a CUTLASS minor version (`cutlass_3_8`); the headers come from the
`nvidia-cutlass` wheel of that version on PyPI (`include/cutlass`, `include/cute` and the
`tools/util/include` helpers), downloaded once with pip, checked against a pinned sha256 and
unpacked (headers only) into a cache keyed by version:

    $KBUILD_CACHE_DIR (default $XDG_CACHE_HOME/kbuild or ~/.cache/kbuild)
        cutlass/<wheel version>/include/...
        cutlass/<wheel version>/tools/util/include/...

A name with no PyPI release, or one for a backend this builder cannot compile (`sycl_tla`,
`metal-cpp`), is refused naming the key and what is available.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..core.backend import Backend
from ..core.errors import BuildError
from ..core.layout import MANIFEST
from ..core.runner import capture

CACHE_VAR = "KBUILD_CACHE_DIR"
WHEEL_PREFIX = "cutlass_library/source/"
HEADER_TREES = ("include/", "tools/util/include/")


@dataclass(frozen=True)
class Release:
    """A CUTLASS release on PyPI as the `nvidia-cutlass` wheel."""

    version: str  # the wheel's version, e.g. 3.8.0.0 (CUTLASS 3.8.0)
    sha256: str

    @property
    def wheel(self) -> str:
        return f"nvidia_cutlass-{self.version}-py3-none-any.whl"


# The newest PyPI release of each CUTLASS minor version upstream names (checked on PyPI).
CUTLASS = {
    "cutlass_3_5": Release("3.5.1.0", "cb90ec9fec86504c1602175fa8a96756e9502884b6aac62a03f814e6b1bb35f1"),
    "cutlass_3_6": Release("3.6.0.0", "8b51469514e119d771e571ade9623a28de05c9ed01030666d17d4ce0b6737454"),
    "cutlass_3_8": Release("3.8.0.0", "013147221a63500205da233ae02e6262463917f3fe39cb09efbca37bfd1c39f9"),
    "cutlass_4_2": Release("4.2.0.0", "f9599ada45c7bcb6bf53f7d3f0a7d154183e53451c01bfa59eecd37dd4a693f6"),
}
# Dependencies of backends this builder does not compile.
OTHER_BACKENDS = {"sycl_tla": Backend.XPU, "metal-cpp": Backend.METAL}
NOT_PROVISIONED = {"torch"}  # handled by the build itself


def available() -> str:
    return ", ".join(f"{n} ({r.version.rsplit('.', 1)[0]})" for n, r in CUTLASS.items())


def cache_root() -> Path:
    if os.environ.get(CACHE_VAR):
        return Path(os.environ[CACHE_VAR]).resolve()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return (Path(base) / "kbuild").resolve()


def release_for(dep: str, *, manifest: Path, key: str) -> Release:
    """The release a dependency name asks for, or a BuildError naming the key."""
    if dep in CUTLASS:
        return CUTLASS[dep]
    if dep in OTHER_BACKENDS:
        raise BuildError(f"{dep} is a dependency of the {OTHER_BACKENDS[dep]} backend, which this "
                         "builder cannot compile", file=manifest, key=key,
                         hint=f"remove it; dependencies provided here: torch, {available()}")
    if dep.startswith("cutlass_"):
        wanted = dep.removeprefix("cutlass_").replace("_", ".")
        raise BuildError(f"{dep}: CUTLASS {wanted} has no nvidia-cutlass release on PyPI",
                         file=manifest, key=key,
                         hint=f"use one that has: {available()}")
    raise BuildError(f"unknown dependency {dep!r}", file=manifest, key=key,
                     hint=f"dependencies provided here: torch, {available()}")


def _download(release: Release, into: Path) -> Path:
    proc = capture([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                    "--disable-pip-version-check", f"nvidia-cutlass=={release.version}",
                    "-d", str(into)], timeout=900)
    wheel = into / release.wheel
    if proc.returncode != 0 or not wheel.is_file():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise BuildError(f"could not download nvidia-cutlass {release.version} from PyPI: "
                         + " / ".join(tail),
                         hint="check the network (pip must reach PyPI) and build again")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != release.sha256:
        raise BuildError(f"{wheel.name} has sha256 {digest}, expected {release.sha256}",
                         hint="the download was altered; remove pip's cache and build again")
    return wheel


def _unpack_headers(wheel: Path, dest: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            name = info.filename
            if info.is_dir() or not name.startswith(WHEEL_PREFIX):
                continue
            rel = name.removeprefix(WHEEL_PREFIX)
            if not rel.startswith(HEADER_TREES) or ".." in Path(rel).parts:
                continue
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, target.open("wb") as out:
                shutil.copyfileobj(src, out)


def provision(release: Release, root: Path | None = None) -> Path:
    """The cached header tree of `release`, downloaded and unpacked on first use."""
    root = root or cache_root()
    final = root / "cutlass" / release.version
    if (final / "include" / "cutlass" / "cutlass.h").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=final.parent, prefix=f".{release.version}.") as tmp:
        wheel = _download(release, Path(tmp) / "wheel")
        staged = Path(tmp) / "tree"
        _unpack_headers(wheel, staged)
        try:
            os.rename(staged, final)
        except OSError:
            if not (final / "include" / "cutlass" / "cutlass.h").is_file():
                raise  # not a concurrent build that got there first
    return final


def include_dirs(tree: Path) -> list[str]:
    return [str(tree / "include"), str(tree / "tools" / "util" / "include")]


def kernel_includes(plan) -> tuple[dict[str, list[str]], list[str]]:
    """Include dirs of the provisioned dependencies by kernel of `plan`, and the roots of their
    header trees (mapped away in the binary); refusals raise."""
    manifest = plan.project / MANIFEST
    out: dict[str, list[str]] = {}
    roots: list[str] = []
    for name, kernel in plan.kernels.items():
        dirs: list[str] = []
        for dep in kernel.depends:
            if dep in NOT_PROVISIONED:
                continue
            tree = provision(release_for(dep, manifest=manifest, key=f"kernel.{name}.depends"))
            dirs += include_dirs(tree)
            roots.append(str(tree))
        out[name] = list(dict.fromkeys(dirs))
    return out, sorted(set(roots))
