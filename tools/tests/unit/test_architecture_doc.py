"""docs/architecture.md's module table names every module of tools/kbuild: by its path, or by the
folder of a package it describes as a whole (`core/manifest/`, `stages/check/pyops/`)."""

from __future__ import annotations

import re
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[2]
DOC = TOOLS.parent / "docs" / "architecture.md"


def table_paths() -> set[str]:
    text = DOC.read_text(encoding="utf-8")
    table = text[text.index("| module | what it holds |"):text.index("| **`kbuild_hub/`** |")]
    cells = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
    return {p for cell in cells for p in re.findall(r"`([^`]+)`", cell)}


def test_every_module_of_kbuild_is_in_the_table():
    named = table_paths()
    root = TOOLS / "kbuild"
    missing = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] == "resources" or rel in (Path("__init__.py"), Path("__main__.py")):
            continue
        if rel.name == "__init__.py" and rel.parent.as_posix() in ("core", "stages", "matrix", "publish",
                                                                    "workflows", "cli"):
            continue  # a folder of modules, not a module
        folders = {f"{'/'.join(rel.parts[:i])}/" for i in range(1, len(rel.parts))}
        short = rel.as_posix().removeprefix("cli/")  # cli's modules share one row
        if rel.as_posix() not in named and short not in named and not folders & named:
            missing.append(rel.as_posix())
    assert not missing, "not in docs/architecture.md's module table: " + ", ".join(missing)
