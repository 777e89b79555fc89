"""Which framework a variant targets: torch, torch's stable ABI, or (refused) tvm-ffi.

`[torch] stable-abi = "2.9"` (or `{ cuda = "2.9" }`, per backend) builds the backend's variant
against torch's stable C API: it is named `torch-stable-abi29-<compute>-<cpu>-<os>`, compiled with
`TORCH_TARGET_VERSION` (torch's headers then hide everything newer or not stable), and checked
with the stable-ABI symbol rules (binary.py). A torch older than the stable-ABI version is
refused; a stable-ABI project never silently becomes a `torchXY` variant.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..core.backend import Backend
from ..core.errors import BuildError
from ..core.layout import MANIFEST
from ..core.manifest import Manifest
from ..core.variant import Variant

STABLE_MIN = (2, 9)  # the first torch with a stable C API for extensions


def refuse_unbuildable(manifest: Manifest, project: Path) -> None:
    """tvm-ffi projects parse but are not built here."""
    if getattr(manifest, "tvm_ffi", None) is not None:
        raise BuildError("tvm-ffi projects cannot be built by this builder (only [torch] and "
                         "[torch-noarch] projects are)", file=project / MANIFEST, key="tvm-ffi",
                         hint="build it with Hugging Face's kernel-builder, or port the binding "
                              "to a [torch] section")


def stable_abi_version(manifest: Manifest, backend: Backend, project: Path) -> tuple[int, int] | None:
    """The stable-ABI version `backend` targets, or None for a regular torch build."""
    text = manifest.stable_abi_for(backend)  # "MAJOR.MINOR", as the manifest normalised it
    if text is None:
        return None
    per_backend = isinstance(manifest.torch.stable_abi, dict)  # type: ignore[union-attr]
    key = f"torch.stable-abi.{backend}" if per_backend else "torch.stable-abi"
    major, minor = text.split(".")
    version = (int(major), int(minor))
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
    return dataclasses.replace(plan, variant=stable_variant(plan.variant, version))


def stable_variant(regular: Variant, version: tuple[int, int]) -> Variant:
    """The stable-ABI variant a build of `regular` (a torch variant) writes instead: one per
    backend, toolkit and platform, whatever the torch (build-all builds it once)."""
    assert regular.backend is not None
    return Variant.torch(version, regular.backend, cpu=regular.cpu, os=regular.os,
                         backend_version=regular.backend_version, framework="torch-stable-abi")


def not_made_by(manifest: Manifest, name: str, project: Path) -> str | None:
    """Why build.toml, as it is now, makes no variant named `name` (a folder an earlier build
    left in build/: another framework, a backend no longer listed, another stable-ABI version),
    or None when it makes one (a name that is no variant is check's to report)."""
    try:
        variant = Variant.parse(name)
    except ValueError:
        return None
    backends = manifest.general.backends
    if variant.backend is not None and variant.backend not in backends:
        return f"build.toml lists no {variant.backend} backend"
    if variant.is_noarch != manifest.is_noarch:
        return ("build.toml makes noarch variants ([torch-noarch])" if manifest.is_noarch else
                "build.toml makes compiled variants, not noarch ones")
    if variant.is_noarch or manifest.torch is None or variant.backend is None:
        return None
    stable = stable_abi_version(manifest, variant.backend, project)
    if stable is None and variant.framework == "torch-stable-abi":
        return f"build.toml builds torch variants for {variant.backend} (no torch.stable-abi)"
    if stable is not None and (variant.framework != "torch-stable-abi" or variant.version != stable):
        return (f"build.toml builds torch-stable-abi{stable[0]}{stable[1]} variants for "
                f"{variant.backend} (torch.stable-abi = \"{stable[0]}.{stable[1]}\")")
    return None
