"""Manifest editions: every older `build.toml` form is upgraded to edition 5 here, and only here."""

from __future__ import annotations

import copy
from typing import Any

CURRENT_EDITION = 5
LEGACY_DEFAULT_LICENSE = "apache-2.0"
LEGACY_DEFAULT_VERSION = 1


def detect_edition(raw: dict[str, Any]) -> int:
    general = raw.get("general", {})
    if not isinstance(general, dict):
        return CURRENT_EDITION
    if "edition" in general:
        return general["edition"]
    if "universal" in general or not {"version", "license", "backends"} <= general.keys():
        return 1
    return 4


def upgrade(raw: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Returns the manifest as edition 5 and the list of changes made to get there."""
    edition = detect_edition(raw)
    if edition == CURRENT_EDITION or not isinstance(raw.get("general"), dict):
        return raw, []
    data = copy.deepcopy(raw)
    general = data["general"]
    notes: list[str] = []
    if edition == 1:
        universal = general.pop("universal", False)
        notes.append("removed `general.universal`")
        if universal and "torch-noarch" not in data:
            data["torch-noarch"] = {}
            notes.append("`universal = true` became a `[torch-noarch]` table")
        if "version" not in general:
            general["version"] = LEGACY_DEFAULT_VERSION
            notes.append(f"set `general.version = {LEGACY_DEFAULT_VERSION}`")
        if "license" not in general:
            general["license"] = LEGACY_DEFAULT_LICENSE
            notes.append(f'set `general.license = "{LEGACY_DEFAULT_LICENSE}"` (check it)')
        if "backends" not in general:
            kernels = data.get("kernel", {})
            backends = sorted({k.get("backend") for k in kernels.values()
                               if isinstance(k, dict) and isinstance(k.get("backend"), str)})
            general["backends"] = backends or ["cpu", "cuda"]
            notes.append(f"set `general.backends = {general['backends']}` from the kernels")
        for kernel in data.get("kernel", {}).values():
            if isinstance(kernel, dict) and "depends" not in kernel:
                kernel["depends"] = []
    noarch = data.get("torch-noarch")
    if isinstance(noarch, dict):
        for old, new in (("cuda_capabilities", "cuda-capabilities"), ("rocm_archs", "rocm-archs")):
            if old in noarch:
                noarch[new] = noarch.pop(old)
    general["edition"] = CURRENT_EDITION
    notes.append(f"set `general.edition = {CURRENT_EDITION}` (was {edition})")
    # Keep `general.edition` first for readability of rewritten files.
    data["general"] = {"name": general.pop("name", None), **general}
    if data["general"]["name"] is None:
        del data["general"]["name"]
    return data, notes
