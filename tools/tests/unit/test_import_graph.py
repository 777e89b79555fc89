"""No import circle and no module over 500 lines in tools/kbuild, tools/kbuild_hub, tools/kbuild_bench.

The graph is read statically (`ast`), and every import statement counts: at module level, inside
a function (a deferred import still ties two concepts together: it only hides the circle from
Python) and under `if TYPE_CHECKING:` (a type named is a concept used). `from package import name`
is an edge to the submodule `package.name` when there is one, else to the package's `__init__`.
The parents Python imports before a submodule are not edges: an `__init__` that re-exports its
submodules would otherwise be in a circle with each of them.
"""

from __future__ import annotations

import ast
import graphlib
import textwrap
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[2]
PACKAGES = ("kbuild", "kbuild_hub", "kbuild_bench")
MAX_LINES = 500


def modules(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Dotted module name: file (a package by its __init__.py)."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def import_graph(root: Path, packages: tuple[str, ...]) -> dict[str, set[str]]:
    """Module: the modules of `packages` it imports."""
    files = modules(root, packages)

    def known(name: str) -> str | None:  # the module a dotted name lies in, if one of ours
        parts = name.split(".")
        return next((m for i in range(len(parts), 0, -1) if (m := ".".join(parts[:i])) in files), None)

    graph = {}
    for name, path in files.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        targets = []
        for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: resolved against the importing module's package
                    base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
                targets += [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
        graph[name] = {m for m in map(known, targets) if m and m != name}
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as e:
        return list(reversed(e.args[1]))  # a → b → ... → a, in import order
    return None


def test_no_import_circle():
    found = cycle(import_graph(TOOLS, PACKAGES))
    assert found is None, "an import circle (a concept in the wrong module): " + " → ".join(found)


def test_no_module_over_500_lines():
    long = {path.relative_to(TOOLS): n for path in modules(TOOLS, PACKAGES).values()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"over {MAX_LINES} lines (split by concept): " + ", ".join(
        f"{path} ({n})" for path, n in sorted(long.items()))


def test_a_stage_imports_only_core_and_the_stages_before_it():
    """stages/ reads as the flow: every stage module is named in `ORDER`, and imports nothing of
    the builder but core/ (and the version) and the stages before it."""
    from kbuild.stages import ORDER
    stages = {p.stem if p.is_file() else p.name for p in (TOOLS / "kbuild" / "stages").iterdir()
              if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()}
    assert stages == set(ORDER)
    graph = import_graph(TOOLS, ("kbuild",))
    wrong = []
    for module, targets in graph.items():
        parts = module.split(".")
        if parts[:2] != ["kbuild", "stages"] or len(parts) < 3:
            continue
        before = {f"kbuild.stages.{s}" for s in ORDER[:ORDER.index(parts[2]) + 1]}
        wrong += [f"{module} → {t}" for t in sorted(targets) if t != "kbuild"
                  and not t.startswith("kbuild.core") and not any(t == b or t.startswith(b + ".")
                                                                  for b in before)]
    assert not wrong, "a stage importing a later stage or another layer: " + ", ".join(wrong)


@pytest.mark.parametrize("where", ["module", "function", "type_checking"])
def test_a_circle_is_found_wherever_the_import_is(tmp_path, where):
    """The graph check itself: a circle closed by a deferred or a type-only import is named."""
    import_b = {"module": "from .sub import b\n",
                "function": "def f():\n    from .sub import b\n",
                "type_checking": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .sub.b import B\n"}
    files = {"pkg/__init__.py": "from .a import A\n",
             "pkg/a.py": import_b[where] + "A = 1\n",
             "pkg/sub/__init__.py": "",
             "pkg/sub/b.py": "import pkg.c\n",
             "pkg/c.py": "from . import a\n",
             "pkg/d.py": "from .sub import b\nfrom pkg import A\n"}
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(textwrap.dedent(text))
    graph = import_graph(tmp_path, ("pkg",))
    assert graph["pkg.d"] == {"pkg.sub.b", "pkg"} and graph["pkg.sub"] == set()
    found = cycle(graph)
    assert found is not None and found[0] == found[-1]
    assert set(found) == {"pkg.a", "pkg.sub.b", "pkg.c"}
    del graph["pkg.c"]
    assert cycle(graph) is None
