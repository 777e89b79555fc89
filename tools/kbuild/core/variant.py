"""Variant names, parsed and printed in one place (the grammar of `kernels.variants`).

    torch213-cxx11-cu130-x86_64-linux       torch ABI variant (Linux: with the C++ ABI tag)
    torch29-cpu-aarch64-darwin              macOS and Windows: no ABI tag
    torch-stable-abi29-cu130-x86_64-linux   torch stable-ABI variant
    tvm-ffi01-cu128-x86_64-linux            tvm-ffi variant
    torch-cuda, torch-cpu                   noarch (pure Python) variants

The planner, the matrix, `check` and `to-wheel` all read and write names through `Variant`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from .backend import UNIVERSAL, Backend, by_compute_prefix

Framework = Literal["torch", "torch-stable-abi", "tvm-ffi", "noarch"]
# Compute names with a toolkit version (cu130 = CUDA 13.0) and without one.
VERSIONED_COMPUTE = by_compute_prefix()
PLAIN_COMPUTE = tuple(b.value for b in Backend if b.needs.compute is None)
CPUS = ("x86_64", "aarch64")
SYSTEMS = ("linux", "darwin", "windows")

_TORCH = re.compile(r"torch(\d)(\d+)")
_STABLE = re.compile(r"torch-stable-abi(\d)(\d+)")
_TVM = re.compile(r"tvm-ffi(\d+?)(\d+)")
_COMPUTE = re.compile("(" + "|".join(VERSIONED_COMPUTE) + r")(\d+)(\d)")


class VariantError(ValueError):
    """A name that is not a variant; `reason` says which part is wrong."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"{name!r} is not a variant name: {reason}")
        self.name = name
        self.reason = reason


def cpu_arch(machine: str) -> str:
    """The variant's CPU name for `platform.machine()` (AMD64 → x86_64, arm64 → aarch64)."""
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine.lower(), machine.lower())


@dataclass(frozen=True)
class Variant:
    framework: Framework
    backend: Backend | None                         # None: the legacy noarch `torch-universal`
    version: tuple[int, int] | None = None          # torch, stable-ABI or tvm-ffi major.minor
    backend_version: tuple[int, int] | None = None  # toolkit major.minor (cu130: 13.0)
    cxx11: bool | None = None                       # C++ ABI tag (Linux torch variants)
    cpu: str | None = None
    os: str | None = None

    @classmethod
    def torch(cls, version: tuple[int, int], backend: Backend, *, cpu: str, os: str,
              backend_version: tuple[int, int] | None = None, cxx11: bool | None = True,
              framework: Framework = "torch") -> "Variant":
        return cls(framework, Backend(backend), version, backend_version,
                   cxx11 if framework == "torch" and os == "linux" else None, cpu_arch(cpu), os)

    @classmethod
    def noarch(cls, backend: Backend | None) -> "Variant":
        return cls("noarch", None if backend is None else Backend(backend))

    @property
    def is_noarch(self) -> bool:
        return self.framework == "noarch"

    @property
    def compute(self) -> str:
        """`cu130`, `rocm64`, `cpu`, … (noarch: the backend name)."""
        if self.backend is None:
            return UNIVERSAL
        if self.backend_version is None:
            return self.backend.value
        return f"{self.backend.needs.compute}{self.backend_version[0]}{self.backend_version[1]}"

    @property
    def release(self) -> str | None:
        """The framework's major.minor, e.g. "2.13"."""
        return f"{self.version[0]}.{self.version[1]}" if self.version else None

    @property
    def name(self) -> str:
        if self.is_noarch:
            return f"torch-{self.compute}"
        major, minor = self.version or (0, 0)
        head = {"torch": f"torch{major}{minor}", "torch-stable-abi": f"torch-stable-abi{major}{minor}",
                "tvm-ffi": f"tvm-ffi{major}{minor}"}[self.framework]
        if self.cxx11 is not None:
            head += "-cxx11" if self.cxx11 else "-cxx98"
        return f"{head}-{self.compute}-{self.cpu}-{self.os}"

    def __str__(self) -> str:
        return self.name

    @classmethod
    def parse(cls, name: str) -> "Variant":
        """The variant of a folder name; raises VariantError naming the part that is wrong."""
        parts = name.split("-")
        if name.startswith("torch-stable-abi"):
            m = _STABLE.fullmatch("-".join(parts[:3]))
            if not m:
                raise VariantError(name, "expected torch-stable-abi<MAJOR><MINOR>")
            return cls._arch(name, "torch-stable-abi", m, parts[3:])
        if parts[0] == "torch":
            backend = "-".join(parts[1:])
            if backend == UNIVERSAL:
                return cls.noarch(None)
            if backend not in Backend.names():
                raise VariantError(name, "expected torch-<backend> for a noarch variant (backends: "
                                         + ", ".join(Backend.names()) + ")")
            return cls.noarch(Backend(backend))
        if parts[0] == "tvm" and len(parts) > 1:
            m = _TVM.fullmatch(f"tvm-{parts[1]}")
            if not m:
                raise VariantError(name, "expected tvm-ffi<MAJOR><MINOR>")
            return cls._arch(name, "tvm-ffi", m, parts[2:])
        m = _TORCH.fullmatch(parts[0])
        if not m:
            raise VariantError(name, "unknown framework (expected torch<MAJOR><MINOR>, "
                                     "torch-stable-abi…, tvm-ffi… or torch-<backend>)")
        rest = parts[1:]
        cxx11 = None
        if rest and rest[0] in ("cxx11", "cxx98"):
            cxx11, rest = rest[0] == "cxx11", rest[1:]
        return cls._arch(name, "torch", m, rest, cxx11)

    @classmethod
    def _arch(cls, name: str, framework: Framework, m: re.Match, rest: list[str],
              cxx11: bool | None = None) -> "Variant":
        if len(rest) != 3:
            raise VariantError(name, "expected <compute>-<cpu>-<os> after the framework")
        compute, cpu, os = rest
        if compute in PLAIN_COMPUTE:
            backend, backend_version = Backend(compute), None
        elif cm := _COMPUTE.fullmatch(compute):
            backend = VERSIONED_COMPUTE[cm[1]]
            backend_version = (int(cm[2]), int(cm[3]))
        else:
            forms = [f"{p}XY" for p in VERSIONED_COMPUTE] + list(PLAIN_COMPUTE)
            raise VariantError(name, f"unknown compute {compute!r} (expected "
                                     f"{', '.join(forms[:-1])} or {forms[-1]})")
        if cpu not in CPUS:
            raise VariantError(name, f"unknown CPU {cpu!r} (expected {' or '.join(CPUS)})")
        if os not in SYSTEMS:
            raise VariantError(name, f"unknown OS {os!r} (expected {', '.join(SYSTEMS)})")
        return cls(framework, backend, (int(m[1]), int(m[2])), backend_version, cxx11, cpu, os)
