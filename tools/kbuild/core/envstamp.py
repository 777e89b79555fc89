"""The stamp a realised environment carries (`kbuild-env.json`, written last when it is
complete): the matrix writes it, and a build reads it to record which environment, from which
lock, built a variant."""

from __future__ import annotations

import json
from pathlib import Path

STAMP = "kbuild-env.json"


def read_stamp(path: Path) -> dict | None:
    try:
        return json.loads((path / STAMP).read_text())
    except (OSError, ValueError):
        return None


def environment_provenance(python: str | None, cuda_home: Path | None) -> dict | None:
    """What metadata.json records of the environment a variant was built in: its name and the
    hashes of the locks it was realised from (null when resolved afresh); None outside one."""
    stamp = read_stamp(Path(python).parent.parent) if python else None
    if not stamp or "env" not in stamp:
        return None
    record = {"name": stamp["env"], "lock": (stamp.get("lock") or {}).get("sha256")}
    for parent in (cuda_home.parents if cuda_home else ()):
        toolkit = read_stamp(parent)
        if toolkit is not None:
            record["toolkit-lock"] = (toolkit.get("lock") or {}).get("sha256")
            break
    return record
