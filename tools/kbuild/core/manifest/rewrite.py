"""`kbuild update-build`: an older `build.toml` rewritten in place as the current edition,
changing only what the upgrade needs (tomlkit keeps comments, order and layout; editions.py holds
what changes), and only when the edited text means exactly the upgraded manifest."""

from __future__ import annotations

import stat
import tomllib
from dataclasses import dataclass
from pathlib import Path

from .. import editions
from ..errors import BuildError
from ..files import write_atomic
from ..layout import MANIFEST
from . import read_raw, validate


@dataclass(frozen=True)
class Rewrite:
    path: Path              # the manifest (a link inside the project resolved: it stays a link)
    text: str               # its new text
    notes: tuple[str, ...]  # what the upgrade changed, one line each

    def write(self) -> None:
        """The new text in place of the old, atomically, keeping the file's mode."""
        write_atomic(self.path, self.text, mode=stat.S_IMODE(self.path.stat().st_mode))


def rewrite(project: Path) -> Rewrite | None:
    """The manifest of `project` as the current edition; None when it is that edition already.
    Nothing is written: an invalid upgrade, or an edit that would mean another manifest, is
    refused first."""
    project = project.resolve()
    raw = read_raw(project)  # a file of the project that parses
    upgraded, notes = editions.upgrade(raw)
    if not notes:
        return None
    path = (project / MANIFEST).resolve()  # a link inside the project stays a link
    validate(upgraded, path)  # fail before writing anything invalid
    try:
        text, _ = editions.upgrade_text(path.read_bytes().decode("utf-8"))
    except Exception as e:  # tomlkit's errors share no base class but Exception
        raise BuildError(f"cannot edit it in place: {e}", file=path,
                         hint="fix the TOML so that tomlkit reads it, or add "
                              f"`edition = {editions.CURRENT_EDITION}` by hand") from None
    if tomllib.loads(text) != upgraded:  # the edited text must mean the upgraded manifest
        raise BuildError("editing it in place gave another manifest than the upgrade; nothing "
                         "was written", file=path, hint="report this; upgrade it by hand with "
                         "the changes `kbuild build` lists")
    return Rewrite(path, text, tuple(notes))
