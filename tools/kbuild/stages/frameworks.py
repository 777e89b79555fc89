"""Which framework a variant targets: torch, torch's stable ABI, or (refused) tvm-ffi.

`[torch] stable-abi = "2.9"` (or `{ cuda = "2.9" }`, per backend) builds the backend's variant
against torch's stable C API: it is named `torch-stable-abi29-<compute>-<cpu>-<os>`, compiled with
`TORCH_TARGET_VERSION` (torch's headers then hide everything newer or not stable), and checked
with the stable-ABI symbol rules (binary.py). A torch older than the stable-ABI version is
refused; a stable-ABI project never silently becomes a `torchXY` variant.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from ..core.errors import BuildError
from ..core.layout import MANIFEST
from ..core.manifest import Manifest
from ..core.variant import Variant

STABLE_MIN = (2, 9)  # the first torch with a stable C API for extensions
_VERSION = re.compile(r"^(\d+)\.(\d+)$")


def refuse_unbuildable(manifest: Manifest, project: Path) -> None:
    """tvm-ffi projects parse but are not built here."""
    if getattr(manifest, "tvm_ffi", None) is not None:
        raise BuildError("tvm-ffi projects cannot be built by this builder (only [torch] and "
                         "[torch-noarch] projects are)", file=project / MANIFEST, key="tvm-ffi",
                         hint="build it with Hugging Face's kernel-builder, or port the binding "
                              "to a [torch] section")


def stable_abi_version(manifest: Manifest, backend: str, project: Path) -> tuple[int, int] | None:
    """The stable-ABI version `backend` targets, or None for a regular torch build."""
    torch = getattr(manifest, "torch", None)
    value = getattr(torch, "stable_abi", None) if torch is not None else None
    if value is None:
        return None
    key = "torch.stable-abi"
    if isinstance(value, dict):
        key = f"torch.stable-abi.{backend}"
        value = value.get(backend)
        if value is None:
            return None
    text = str(value)
    m = _VERSION.match(text)
    if not m:
        raise BuildError(f"{text!r} is not a torch version", file=project / MANIFEST, key=key,
                         hint='write the stable-ABI version as "MAJOR.MINOR", e.g. "2.9"')
    version = (int(m[1]), int(m[2]))
    if version < STABLE_MIN:
        raise BuildError(f"torch has no stable ABI before {STABLE_MIN[0]}.{STABLE_MIN[1]}",
                         file=project / MANIFEST, key=key,
                         hint=f'use "{STABLE_MIN[0]}.{STABLE_MIN[1]}" or newer')
    return version


def target_version_hex(version: tuple[int, int]) -> str:
    """TORCH_TARGET_VERSION as torch's headers define it (major << 56 | minor << 48)."""
    return f"0x{(version[0] << 56) | (version[1] << 48):016x}"


def apply(plan):
    """The plan as a stable-ABI variant when the manifest asks for one (else unchanged)."""
    if not plan.compiled or plan.torch is None:
        return plan
    version = stable_abi_version(plan.manifest, plan.backend, plan.project)
    if version is None:
        return plan
    release = plan.torch.torch_release
    if (release.major, release.minor) < version:
        raise BuildError(f"torch {plan.torch.torch_version} is older than the stable-ABI version "
                         f"{version[0]}.{version[1]} this project targets",
                         file=plan.project / MANIFEST, key="torch.stable-abi",
                         hint="build with a newer torch, or lower torch.stable-abi")
    regular = Variant.parse(plan.name)
    stable = Variant.torch(version, regular.backend, cpu=regular.cpu, os=regular.os,
                           backend_version=regular.backend_version, framework="torch-stable-abi")
    return dataclasses.replace(plan, name=stable.name)


def is_stable(plan) -> bool:
    return Variant.parse(plan.name).framework == "torch-stable-abi"


def plan_stable_version(plan) -> tuple[int, int] | None:
    v = Variant.parse(plan.name)
    return v.version if v.framework == "torch-stable-abi" else None
