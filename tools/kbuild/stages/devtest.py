"""`kbuild dev`'s last step: the project's own tests/ run by pytest against its build, with
every path of a built variant's Python file in their output shown as the torch-ext/ file it
was copied from (so a traceback points at the source to edit)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Callable

from ..core import manifest as manifest_mod
from ..core.layout import METADATA, Layout
from ..core.runner import call, stream

# pytest options that need the terminal itself (a debugger, uncaptured output).
INTERACTIVE = ("--pdb", "--trace", "-s", "--capture=no")


def source_map(project: Path, build_dir: Path) -> dict[str, str]:
    """Python files of built variants → the torch-ext/ files they were copied from, as absolute
    paths and as paths relative to the project (how pytest prints them)."""
    module = manifest_mod.load(project).general.module_name
    package = Layout.of(project).module_dir(module)
    mapping: dict[str, str] = {}
    if not build_dir.is_dir():
        return mapping
    for variant in build_dir.iterdir():
        if not (variant / METADATA).is_file():
            continue
        for built in variant.rglob("*.py*"):
            source = package / built.relative_to(variant)
            if built.suffix in (".py", ".pyi") and source.is_file():
                mapping[str(built)] = str(source)
                if built.is_relative_to(project):
                    mapping[str(built.relative_to(project))] = str(source.relative_to(project))
    return mapping


def path_rewriter(mapping: dict[str, str]) -> Callable[[str], str]:
    """A function that rewrites every mapped path in a line of output."""
    if not mapping:
        return lambda line: line
    pattern = re.compile("|".join(re.escape(k) for k in sorted(mapping, key=len, reverse=True)))
    return lambda line: pattern.sub(lambda m: mapping[m.group(0)], line)


def pytest_args(project: Path) -> list[str]:
    """pytest's rootdir, configuration file and conftest search pinned to the project: its own
    configuration (in tests/ or the project folder, as pytest would look for it) when it has one,
    else none; never a parent folder's pytest.ini, pyproject.toml or conftest.py."""
    import configparser
    import os
    import tomllib

    def configures_pytest(path: Path) -> bool:
        if not path.is_file():
            return False
        if path.name in ("pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini"):
            return True
        try:
            if path.name == "pyproject.toml":
                return "pytest" in tomllib.loads(path.read_text(encoding="utf-8")).get("tool", {})
            parser = configparser.ConfigParser(interpolation=None)
            parser.read(path, encoding="utf-8")
        except (OSError, ValueError, configparser.Error):  # pytest will say what is wrong
            return True
        return parser.has_section("pytest" if path.name == "tox.ini" else "tool:pytest")

    names = ("pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini", "pyproject.toml",
             "tox.ini", "setup.cfg")
    config = next((folder / name for folder in (project / "tests", project) for name in names
                   if configures_pytest(folder / name)), None)
    return ["--rootdir", str(project), "-c", str(config or os.devnull), "--confcutdir", str(project)]


def run_tests(project: Path, python: str | None, args: list[str], *,
              write: Callable[[str], None], color: bool = False) -> int:
    """pytest on `project/tests` in the target interpreter; its output, paths rewritten, goes to
    `write` line by line (an interactive run, `--pdb`, has the terminal). Returns pytest's exit
    status."""
    cmd = [python or sys.executable, "-m", "pytest", str(project / "tests"), "-q",
           *pytest_args(project), *args]
    if any(a in INTERACTIVE for a in args):
        return call(cmd, cwd=project)
    if color and not any(a.startswith("--color") for a in args):
        cmd.append("--color=yes")
    rewrite = path_rewriter(source_map(project, Layout.of(project).build_dir))
    return stream(cmd, lambda line: write(rewrite(line)), cwd=project)
