"""Manifest editions: every older `build.toml` form is upgraded to edition 5 here, and only here.

Upstream's editions, as told apart by their keys (only edition 5 has an `edition` key):
    1  kernels have a `language` (cuda, cuda-hipify, metal) instead of a `backend`;
       `[torch] universal = true` marks a pure-Python kernel
    2  kernels have a `backend`; `[general]` has `universal`, `cuda-minver`, `cuda-maxver`
       and no `backends`
    3  `[general] backends`; `version` and `license` optional; no framework table means noarch
    4  `version`, `license` and one of [torch], [torch-noarch], [tvm-ffi] required
Each step below turns edition N into N+1; the model then validates the edition 5 result. Data of
the wrong shape is left as it is, for the model to report with its key. The steps edit any
mapping in place: parsed TOML in memory (`upgrade`), or tomlkit's document of the file, so that
`update-build` changes only what the upgrade needs and keeps comments and layout
(`upgrade_text`).

Edition 4 differs from 5 only by the key: upstream reads it without a word, and so does every
command here (`QUIET_FROM`); `kbuild check` notes it once, `update-build` adds the key.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, MutableMapping
from typing import Any

from .backend import UNIVERSAL_BACKENDS as _UNIVERSAL, Backend

CURRENT_EDITION = 5
QUIET_FROM = 4  # editions read without a warning (the upgrade only adds `edition = 5`)
LEGACY_DEFAULT_LICENSE = "apache-2.0"
LEGACY_DEFAULT_VERSION = 1
# Upstream gives a universal (pure-Python) kernel of editions 1-2 these backends.
UNIVERSAL_BACKENDS = Backend.names(_UNIVERSAL)
# Edition 1 kernel languages and the backend each became; without either, cpu and cuda.
LANGUAGES = {"cuda": Backend.CUDA.value, "cuda-hipify": Backend.CUDA.value,
             "metal": Backend.METAL.value}
DEFAULT_BACKENDS = Backend.names([Backend.CPU, Backend.CUDA])
FRAMEWORKS = ("torch", "torch-noarch", "tvm-ffi")


def _table(data: dict, key: str) -> dict:
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def _kernels(data: dict) -> dict[str, dict]:
    return {n: k for n, k in _table(data, "kernel").items() if isinstance(k, dict)}


def detect_edition(raw: dict[str, Any]) -> int:
    general = raw.get("general")
    if not isinstance(general, dict):
        return CURRENT_EDITION  # nothing to upgrade; the model reports the problem
    if "edition" in general:
        edition = general["edition"]
        return edition if type(edition) is int else CURRENT_EDITION
    if (any("backend" not in k for k in _kernels(raw).values())
            or "universal" in _table(raw, "torch")):
        return 1
    if "backends" not in general:
        return 2
    if not {"version", "license"} <= general.keys() or not any(f in raw for f in FRAMEWORKS):
        return 3
    return 4


def _v1_to_v2(data: dict, notes: list[str]) -> None:
    torch = _table(data, "torch")
    if "universal" in torch:
        data["general"]["universal"] = torch.pop("universal")
        notes.append("moved `torch.universal` to `general.universal`")
    kernels = _table(data, "kernel")
    for name, kernel in list(_kernels(data).items()):
        if "backend" in kernel or kernel.get("language", "cuda") not in LANGUAGES:
            continue
        language = str(kernel.pop("language", "cuda"))
        kernel["backend"] = LANGUAGES[language]
        notes.append(f"kernel.{name}: language {language!r} became backend "
                     f"{LANGUAGES[language]!r}")
        if language == "cuda-hipify" and f"{name}_rocm" not in kernels:
            rocm = {k: copy.deepcopy(v) for k, v in kernel.items()
                    if k in ("depends", "include", "src", "rocm-archs")}
            kernel.pop("rocm-archs", None)
            kernels[f"{name}_rocm"] = {"backend": Backend.ROCM.value, **rocm}
            notes.append(f"kernel.{name}: hipified as kernel.{name}_rocm")


def _v2_to_v3(data: dict, notes: list[str]) -> None:
    general = data["general"]
    for old, new in (("cuda-minver", "minver"), ("cuda-maxver", "maxver")):
        if old in general and isinstance(general.setdefault("cuda", {}), dict):
            general["cuda"][new] = general.pop(old)
            notes.append(f"moved `general.{old}` to `general.cuda.{new}`")
    deps, cuda = general.get("python-depends"), general.get("cuda", {})
    if (isinstance(deps, list) and "nvidia-cutlass-dsl" in deps and isinstance(cuda, dict)
            and isinstance(cuda.get("python-depends", []), list)):
        deps.remove("nvidia-cutlass-dsl")
        if "cuda" not in general:
            general["cuda"] = {}
        if "python-depends" not in general["cuda"]:  # read again: a document stores a copy
            general["cuda"]["python-depends"] = []
        general["cuda"]["python-depends"].append("nvidia-cutlass-dsl")
        notes.append("moved `nvidia-cutlass-dsl` to `general.cuda.python-depends`")
    universal = general.pop("universal", None)
    if universal is not None:
        notes.append("removed `general.universal`")
    if universal is True and "torch-noarch" not in data:
        torch = data.pop("torch", None)
        data["torch-noarch"] = ({"pyext": torch["pyext"]}
                                if isinstance(torch, dict) and "pyext" in torch else {})
        notes.append("`universal = true` became a `[torch-noarch]` table")
    if "backends" not in general:
        backends = sorted({k["backend"] for k in _kernels(data).values()
                           if isinstance(k.get("backend"), str)})
        backends = backends or (UNIVERSAL_BACKENDS if universal is True else DEFAULT_BACKENDS)
        general["backends"] = backends
        notes.append(f"set `general.backends = {[str(b) for b in backends]}`")


def _v3_to_v4(data: dict, notes: list[str]) -> None:
    general = data["general"]
    if "version" not in general:
        general["version"] = LEGACY_DEFAULT_VERSION
        notes.append(f"set `general.version = {LEGACY_DEFAULT_VERSION}`")
    if "license" not in general:
        general["license"] = LEGACY_DEFAULT_LICENSE
        notes.append(f'set `general.license = "{LEGACY_DEFAULT_LICENSE}"` (check it)')
    if not any(f in data for f in FRAMEWORKS):
        data["torch-noarch"] = {}
        notes.append("no framework table: added `[torch-noarch]`")
    for name, kernel in _kernels(data).items():
        if "depends" not in kernel:
            kernel["depends"] = []
            notes.append(f"set `kernel.{name}.depends = []`")


STEPS = {1: _v1_to_v2, 2: _v2_to_v3, 3: _v3_to_v4}


def _upgrade_in_place(data: MutableMapping[str, Any]) -> list[str]:
    """Edition N (no `edition` key) → 5, in place; the changes made, in words."""
    edition = detect_edition(data)
    notes: list[str] = []
    for step in range(edition, CURRENT_EDITION - 1):
        STEPS[step](data, notes)
    notes.append(f"set `general.edition = {CURRENT_EDITION}` (was {edition})")
    return notes


def older_edition_note(edition: int) -> str | None:
    """What `kbuild check` says once of a manifest of an older edition (None: the current)."""
    if edition >= CURRENT_EDITION:
        return None
    change = (f"adds `edition = {CURRENT_EDITION}`, the only difference" if edition >= QUIET_FROM
              else "rewrites what changed since, keeping comments and layout")
    return (f"build.toml is edition {edition}, read as edition {CURRENT_EDITION}; "
            f"`kbuild update-build` {change}")


def _needs_upgrade(raw: Mapping[str, Any]) -> bool:
    general = raw.get("general")
    return isinstance(general, dict) and "edition" not in general  # else edition 5, or a problem


def upgrade(raw: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Returns the manifest as edition 5 and the list of changes made to get there."""
    if not _needs_upgrade(raw):
        return raw, []
    data = copy.deepcopy(raw)
    notes = _upgrade_in_place(data)
    data["general"]["edition"] = CURRENT_EDITION
    return data, notes


def upgrade_text(text: str) -> tuple[str, list[str]]:
    """`build.toml`'s text as edition 5, edited in place: the keys and tables the upgrade
    changes differ, every other line (comments, order, spacing) is the original's. `edition`
    goes after `version` (else after `name`), where upstream writes it. The text must parse
    (tomllib read it first); the result reads as `upgrade` of it."""
    import tomlkit
    from tomlkit.items import Table

    doc = tomlkit.parse(text)
    if not _needs_upgrade(doc):
        return text, []
    notes = _upgrade_in_place(doc)
    general = doc["general"]
    body = general.value.body if isinstance(general, Table) else []
    keys = [key.key if key is not None else None for key, _ in body]
    anchor = next((keys.index(k) for k in ("version", "name") if k in keys), None)
    if anchor is not None and anchor + 1 < len(body):
        general.value._insert_at(anchor + 1, "edition", CURRENT_EDITION)  # tomlkit has no public insert
    else:
        general["edition"] = CURRENT_EDITION
    return doc.as_string(), notes
