"""The model card (README.md on `main`): CARD.md, or one generated from the kernel's own
sources (read with `ast`, never imported)."""

from __future__ import annotations

import ast
from pathlib import Path

from ..core import manifest as manifest_mod
from ..core.built import BuiltVariant

CARD = "CARD.md"


def _first_line(doc: str | None) -> str:
    return (doc or "").strip().splitlines()[0].strip() if (doc or "").strip() else ""


def _literal_all(tree: ast.Module) -> list[str] | None:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return None
            return [str(v) for v in value]
    return None


def _parse(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None


def describe_functions(init: Path) -> tuple[str, list[str]]:
    """(module docstring's first line, one bullet per public function) from source, unimported."""
    tree = _parse(init)
    if tree is None:
        return "", []
    defs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    names = _literal_all(tree)
    if names is None:
        names = [n for n in defs if not n.startswith("_")]
    bullets = []
    for name in names:
        node = defs.get(name)
        if node is None:
            bullets.append(f"- `{name}`")
            continue
        sig = f"{name}({ast.unparse(node.args)})"
        if node.returns is not None:
            sig += f" -> {ast.unparse(node.returns)}"
        doc = _first_line(ast.get_docstring(node))
        bullets.append(f"- `{sig}`" + (f": {doc}" if doc else ""))
    return _first_line(ast.get_docstring(tree)), bullets


def describe_layers(variant: Path) -> list[str]:
    for candidate in (variant / "layers" / "__init__.py", variant / "layers.py"):
        tree = _parse(candidate) if candidate.is_file() else None
        if tree is None:
            continue
        names = _literal_all(tree)
        classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
        if names is None:
            names = [n for n in classes if not n.startswith("_")]
            for node in tree.body:  # `from .rms import RMSNorm` re-exports
                if isinstance(node, ast.ImportFrom) and node.level:
                    names += [a.asname or a.name for a in node.names if not a.name.startswith("_")]
        bullets = []
        for name in dict.fromkeys(names):
            doc = _first_line(ast.get_docstring(classes[name])) if name in classes else ""
            bullets.append(f"- `{name}`" + (f": {doc}" if doc else ""))
        return bullets
    return []


def generate_card(manifest: manifest_mod.Manifest, repo_id: str,
                  variants: list[BuiltVariant]) -> str:
    general = manifest.general
    module = general.module_name
    summary, functions = describe_functions(variants[0].path / "__init__.py")
    layers = describe_layers(variants[0].path)
    lines = ["---", f"license: {general.license}", "tags:", "- kernels", "---", "",
             f"# {general.name}", ""]
    if summary:
        lines += [summary, ""]
    lines += ["A compute kernel for PyTorch in the Hugging Face "
              "[`kernels`](https://github.com/huggingface/kernels) format.", "",
              "## How to use", "", "```python", "from kernels import get_kernel", "",
              f'{module} = get_kernel("{repo_id}", version={general.version})']
    if functions and "`" in functions[0]:
        first = functions[0].split("`")[1].split("(")[0]
        lines.append(f"{module}.{first}(...)")
    lines += ["```", ""]
    lines += ["## Functions", ""] + (functions or ["(none exported)"]) + [""]
    if layers:
        lines += ["## Layers", "", "For `kernels.kernelize` (`LayerRepository(repo_id="
                  f'"{repo_id}", layer_name=...)`):', ""] + layers + [""]
    lines += [f"## Variants (version {general.version})", ""]
    lines += [f"- `{v.name}`" for v in variants] + [""]
    sources = [f"- {k}: {getattr(general, k)}" for k in ("upstream", "source") if getattr(general, k)]
    if sources:
        lines += ["## Source", ""] + sources + [""]
    lines += ["Built with pixi-kernel-builder.", ""]
    return "\n".join(lines)


def card_text(project: Path, manifest: manifest_mod.Manifest, repo_id: str,
              variants: list[BuiltVariant]) -> tuple[str, str]:
    """(README text, where it came from)."""
    card = project / CARD
    if card.is_file():
        return card.read_text(encoding="utf-8"), CARD
    return generate_card(manifest, repo_id, variants), "generated"
