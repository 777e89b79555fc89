"""Around Ninja: what a build compiled from, by content.

Ninja compiles what is older than its inputs, by modification time: a source replaced by a file
with an older mtime (`mv`, `cp -p`, `tar -x`, `rsync -a`, some checkouts) would leave the object
of the old source in the binary. So after each successful compile the content (sha256) of every
project file the build read, the sources and the project headers they include as Ninja's deps
log lists them, is recorded in the build folder (`kbuild-inputs.json`, with each file's inode,
size, mtime and status-change time); before the next compile, every output built from a file
whose content is not the recorded one is removed, and Ninja builds it again (the compiler cache
makes that cheap). Without a record (a folder built before this existed), every compiled output
is removed once. Files outside the project (torch, CUDA, CUTLASS: the toolchain) and what the
builder generates (`.kbuild/`) are not recorded.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from ...core.files import write_atomic
from ...core.layout import Layout
from ...core.runner import capture

RECORD = "kbuild-inputs.json"
UNKNOWN = ""  # the sha256 of a file that changed while it was compiled: never a match


@dataclass(frozen=True)
class Inputs:
    """The project files a build is about to compile from, as they were before it started."""
    build: Path
    project: Path
    ninja: str
    files: dict[str, list]  # path -> [inode, size, mtime_ns, ctime_ns, sha256]
    log: list | None  # Ninja's deps log as it was (unchanged after the build: nothing compiled)


def _stat(path: str) -> list | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _sha256(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except OSError:
        return None


def ninja_deps(build: Path, ninja: str) -> dict[str, list[str]]:
    """Each output of Ninja's deps log with the files it was built from (absolute paths)."""
    proc = capture([ninja, "-C", str(build), "-t", "deps"], timeout=300)
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in proc.stdout.splitlines() if proc.returncode == 0 else []:
        if line.startswith((" ", "\t")) and current is not None:
            current.append(os.path.normpath(build / line.strip()))
        elif ": #deps" in line:
            current = found.setdefault(line.split(": #deps", 1)[0], [])
        else:
            current = None
    return found


def _own(path: str, project: Path) -> bool:
    root, work = str(project) + os.sep, str(Layout.of(project).work) + os.sep
    return path.startswith(root) and not path.startswith(work)


def _record(build: Path) -> dict[str, list] | None:
    try:
        data = json.loads((build / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _current(path: str, recorded: list | None) -> list | None:
    """[inode, size, mtime, ctime, sha256] of `path` now (the recorded sha256 when its status
    is the recorded one), or None when it is gone."""
    stat = _stat(path)
    if stat is None:
        return None
    if recorded is not None and recorded[:4] == stat:
        return recorded
    digest = _sha256(path)
    return None if digest is None else [*stat, digest]


def _deps_log(build: Path) -> list | None:
    return _stat(str(build / ".ninja_deps"))


def prepare(build: Path, project: Path, ninja: str) -> Inputs:
    """Before Ninja runs: removes the outputs built from a project file whose content is not the
    one recorded after the last successful build (all of them without a record)."""
    project = project.resolve()
    record = _record(build)
    now: dict[str, list] = {}
    changed = set()
    for path, recorded in (record or {}).items():
        current = _current(path, recorded if isinstance(recorded, list) else None)
        if current is not None:
            now[path] = current
        if current is None or current[4] != (recorded or [None] * 5)[4]:
            changed.add(path)
    if record is None or changed:
        deps = ninja_deps(build, ninja)
        stale = set(deps) if record is None else {
            out for out, files in deps.items() if changed.intersection(files)}
        for out in stale:
            (build / out).unlink(missing_ok=True)
    unchanged_log = record is not None and not changed and now == record
    return Inputs(build, project, ninja, now, _deps_log(build) if unchanged_log else None)


def record(inputs: Inputs) -> None:
    """After a successful build: the content of every project file it read. A file whose status
    changed during the build is recorded as unknown, so the next build compiles it again."""
    if inputs.log is not None and _deps_log(inputs.build) == inputs.log:
        return  # nothing was compiled and nothing changed: the record stands
    files: dict[str, list] = {}
    for out_files in ninja_deps(inputs.build, inputs.ninja).values():
        for path in out_files:
            if path in files or not _own(path, inputs.project):
                continue
            before = inputs.files.get(path)
            stat = _stat(path)
            if stat is None:
                continue
            if before is not None and before[:4] != stat:
                files[path] = [*before[:4], UNKNOWN]
            else:
                current = _current(path, before)
                if current is not None:
                    files[path] = current
    write_atomic(inputs.build / RECORD, json.dumps(files, sort_keys=True))
