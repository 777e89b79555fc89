"""compile_commands.json for editors: the compile lines of the variants just built, merged at the
project's root where clangd and VS Code's C/C++ extension look. It holds this machine's paths, so
it is never a file the builder may write over when it did not write it: a user's own file or
link stays; the digest of what the builder wrote is kept in .kbuild/ (Layout)."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from pathlib import Path
from typing import Callable

from ...core.files import write_atomic
from ...core.layout import COMPILE_COMMANDS, Layout
from . import pch
from ..generate import BUILD_FOLDER


def export_compile_commands(project: Path, works: list[Path],
                            note: Callable[[str], None] | None = None) -> Path | None:
    """The compile commands of the variants just built, merged, written (atomically) to the
    project's compile_commands.json, where clangd and VS Code's C/C++ extension look. Only a
    file this builder wrote is replaced (`ours`): a user's own file or link is left as it is,
    said once in `note`."""
    entries: list[dict] = []
    for work in works:
        found = work / BUILD_FOLDER / COMPILE_COMMANDS
        try:
            entries += [_without_pch(e) for e in json.loads(found.read_text(encoding="utf-8"))]
        except (OSError, ValueError, AttributeError, TypeError):
            continue
    if not entries:
        return None
    layout = Layout.of(project)
    target, mark = layout.compile_commands, layout.compile_commands_mark
    if not ours(target, mark):
        if note:
            note(f"{target} is not one kbuild wrote (your own file or link): left as it is; "
                 f"remove it to get this build's compile commands there")
        return None
    text = json.dumps(entries, indent=1) + "\n"
    try:
        previous = mark.read_text(encoding="ascii").split()[-1:] if mark.is_file() else []
        # The new digest is remembered before the file is replaced (an interruption between
        # the two leaves the old file, whose digest is kept beside it, still ours).
        mark.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(mark, "\n".join(previous + [_sha256(text.encode())]) + "\n")
        write_atomic(target, text)
    except OSError:
        return None  # a convenience: never fails a build
    return target


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def ours(target: Path, mark: Path) -> bool:
    """Whether the builder may write `target`: nothing is there, or the file there is one it
    wrote (its digest is in `mark`). A link, even to a file of ours, is the user's."""
    if not os.path.lexists(target):
        return True
    if target.is_symlink() or not target.is_file():
        return False
    try:
        data = target.read_bytes()
        if not mark.exists():
            return _unmarked_but_ours(data, mark.parent)
        return _sha256(data) in mark.read_text(encoding="ascii").split()
    except (OSError, UnicodeDecodeError):
        return False


def _unmarked_but_ours(data: bytes, work: Path) -> bool:
    """A file builders before the mark wrote: exactly what this writer writes, every entry's
    folder in this project's work folder (.kbuild/<variant>/)."""
    try:
        entries = json.loads(data)
        return (isinstance(entries, list) and bool(entries)
                and json.dumps(entries, indent=1).encode() + b"\n" == data
                and all(isinstance(e, dict) and Path(str(e.get("directory", ""))).is_relative_to(work)
                        for e in entries))
    except ValueError:
        return False


def _without_pch(entry: dict) -> dict:
    """An entry without the precompiled torch header (a GCC .gch that clang cannot read: the
    binding includes the same torch headers itself)."""
    words = shlex.split(entry["command"])
    kept: list[str] = []
    for i, w in enumerate(words):
        pch_include = w == "-include" and i + 1 < len(words) and words[i + 1].endswith(pch.HEADER)
        if pch_include or (i and words[i - 1] == "-include" and w.endswith(pch.HEADER)):
            continue
        if w not in ("-Winvalid-pch", "-fpch-preprocess"):
            kept.append(w)
    return {**entry, "command": shlex.join(kept)}
