"""The PyPI packages of a variant's `python-depends` entries: the `kernels` loader's own table
(its `python_depends.json`, the names it checks at load), the entry itself otherwise, which must
then be a bare package name (no version, URL or marker comes from a manifest or metadata)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from .errors import BuildError

REQUIREMENT_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")  # a bare PyPI name


def loader_table() -> dict:
    """kernels' python_depends.json; empty where kernels is missing or its table moved."""
    try:
        from importlib import resources
        return json.loads((resources.files("kernels") / "python_depends.json").read_text())
    except Exception:  # noqa: BLE001 (fall back to the names themselves)
        return {}


def pypi_names(depends: list[str], backend: str, where: Path, key: str = "python-depends"
               ) -> list[str]:
    """PyPI names of `depends` for a variant of `backend` (e.g. `tvm-ffi` → `apache-tvm-ffi`)."""
    table = loader_table()
    known = {**table.get("general", {}), **table.get("backends", {}).get(backend, {})}
    out: list[str] = []
    for dep in depends:
        pkgs = [p["pkg"] for p in known.get(dep, {}).get("python", [])]
        if not pkgs and not REQUIREMENT_NAME.fullmatch(dep):
            raise BuildError(f"python-depends entry {dep!r} is not a package name", file=where,
                             key=key, hint="list bare PyPI names, e.g. einops")
        out += [p for p in pkgs or [dep] if p not in out]
    return out
