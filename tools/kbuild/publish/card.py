"""The model card (README.md on `main`): the project's CARD.md rendered as kernel-builder's
`fill-card` renders it, or a card generated from the kernel's own sources (read with `ast`,
never imported) when the project has none.

CARD.md is a Jinja template (kernels-community's are): rendered in a sandbox with `trim_blocks`,
with the eight variables kernel-builder gives it (`card_variables`), its YAML front matter then
read as huggingface_hub reads a card's metadata. A template or front-matter error is one
BuildError naming CARD.md and the line, before anything is uploaded.
"""

from __future__ import annotations

import ast
import json
import re
import traceback
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..core import manifest as manifest_mod
from ..core.built import BuiltVariant, variant_dirs
from ..core.errors import BuildError
from ..core.files import write_atomic
from ..core.layout import MANIFEST, TORCH_EXT, Layout
from ..core.manifest import inside

CARD = "CARD.md"
MAX_CARD_BYTES = 1 << 20       # CARD.md read at most this big
MAX_RENDERED_CHARS = 4 << 20   # a template that writes more is refused
VARIABLES = ("repo_id", "version", "functions", "layers", "has_benchmark", "upstream", "source",
             "license")


# ----------------------------------------------------------------------------- the variables


def _parse(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None


def _source(project: Path, *parts: str) -> Path | None:
    """A file of the project's package, None when missing or a link out of the project."""
    path = project.joinpath(*parts)
    return path if path.is_file() and inside(project, path) else None


def all_names(init: Path | None) -> list[str] | None:
    """The string literals of the first top-level `__all__ = [...]` that has any (kernel-builder's
    `extract_all`: a tuple, an annotated or augmented assignment does not count)."""
    tree = _parse(init) if init else None
    for node in tree.body if tree else []:
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.List)
                and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)):
            continue
        names = [e.value for e in node.value.elts
                 if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        if names:
            return names
    return None


def _url(value: str | None) -> str | None:
    """A URL as kernel-builder prints it (the URL standard's form: scheme and host lower-cased,
    an empty path written `/`)."""
    if not value:
        return None
    try:
        parts = urlsplit(value)
    except ValueError:
        return value
    if not parts.scheme or not parts.netloc:
        return value
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), parts.path or "/", parts.query,
                       parts.fragment))


def card_variables(project: Path, manifest: manifest_mod.Manifest,
                   repo_id: str | None = None) -> dict[str, Any]:
    """The variables kernel-builder's `fill-card` renders CARD.md with. `repo_id` is build.toml's
    `[general.hub] repo-id` (else `repo_id`, e.g. upload's --repo-id); left out when neither is
    set, so a template that uses it fails."""
    project = project.resolve()
    general = manifest.general
    module = general.module_name
    init = next(filter(None, (_source(project, ext, module, "__init__.py")
                              for ext in (TORCH_EXT, "tvm-ffi-ext"))), None)
    names = all_names(init)
    functions = [n for n in names or [] if n != "layers"] or None
    layers = None
    if names and "layers" in names:
        layers_file = (_source(project, TORCH_EXT, module, "layers", "__init__.py")
                       or _source(project, TORCH_EXT, module, "layers.py"))
        tree = _parse(layers_file) if layers_file else None
        layers = [n.name for n in tree.body if isinstance(n, ast.ClassDef)] if tree else None
    raw_general = manifest_mod.read_raw(project).get("general")
    variables: dict[str, Any] = {
        "version": general.version if isinstance(raw_general, dict) and "version" in raw_general
        else None,
        "functions": functions,
        "layers": layers or None,
        "has_benchmark": (project / "benchmarks" / "benchmark.py").exists(),
        "upstream": _url(general.upstream),
        "source": _url(general.source),
        "license": general.license.lower(),
    }
    if general.hub.repo_id or repo_id:
        variables["repo_id"] = general.hub.repo_id or repo_id
    return variables


# ----------------------------------------------------------------------------- rendering


def _text(value: Any) -> Any:
    """`{{ value }}` as minijinja 2.19 (kernel-builder's renderer) writes it: none, true, false,
    a list as ["a", "b"]."""
    return _debug(value) if value is None or isinstance(value, (bool, list, tuple)) else value


def _debug(value: Any) -> str:
    """minijinja's debug form of a value (how it writes the items of a list)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_debug(v) for v in value) + "]"
    return str(value)


def _template_line(exc: BaseException) -> int | None:
    """The CARD.md line an error was raised at (jinja2 maps its frames to template lines)."""
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if f.filename == "<template>"]
    return lines[-1] if lines else None


def read_card(project: Path) -> str | None:
    """CARD.md's text; None without one. A link out of the project, a huge or non-UTF-8 file is
    refused."""
    project = project.resolve()
    path = project / CARD
    if not path.exists() and not path.is_symlink():
        return None
    if not path.is_file() or not inside(project, path):
        raise BuildError("not a file of the project (a link out of it, or not a file)", file=path,
                         hint="make CARD.md a file of the project")
    if path.stat().st_size > MAX_CARD_BYTES:
        raise BuildError(f"{path.stat().st_size} bytes; a card is at most {MAX_CARD_BYTES}",
                         file=path, hint="shorten the card")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise BuildError("not UTF-8 text", file=path, hint="save CARD.md as UTF-8") from None


def render_card(project: Path, manifest: manifest_mod.Manifest, repo_id: str | None = None,
                text: str | None = None) -> str:
    """CARD.md rendered (`text`: its content, read here when not given), front matter checked."""
    from jinja2 import StrictUndefined, TemplateSyntaxError, UndefinedError
    from jinja2.sandbox import SandboxedEnvironment

    project = project.resolve()
    path = project / CARD
    text = read_card(project) if text is None else text
    if text is None:
        raise BuildError("no CARD.md", file=path, hint="write one, or upload without it (a card "
                                                       "is generated)")
    variables = card_variables(project, manifest, repo_id)
    env = SandboxedEnvironment(trim_blocks=True, undefined=StrictUndefined, finalize=_text,
                               autoescape=False)
    hint = "fix the template (Jinja syntax; `kbuild card` prints the rendered card)"
    try:
        template = env.from_string(text)
    except TemplateSyntaxError as e:
        raise BuildError(f"template error: {e.message}", file=f"{path}:{e.lineno}",
                         hint=hint) from None
    chunks: list[str] = []
    size = 0
    try:
        for chunk in template.generate(**variables):
            size += len(chunk)
            if size > MAX_RENDERED_CHARS:
                raise BuildError(f"the rendered card is longer than {MAX_RENDERED_CHARS} "
                                 "characters", file=path, hint=hint)
            chunks.append(chunk)
    except BuildError:
        raise
    except Exception as e:  # whatever the template raised (a recursion, 1/0, a sandbox refusal)
        line = _template_line(e)
        where = f"{path}:{line}" if line else str(path)
        message = getattr(e, "message", None) or str(e)
        if isinstance(e, UndefinedError) and "'repo_id' is undefined" in message:
            raise BuildError("the card uses repo_id, and build.toml has no [general.hub] repo-id",
                             file=where, hint=f"set general.hub.repo-id in {MANIFEST} (kernel-"
                                              "builder's fill-card needs it too)") from None
        if isinstance(e, UndefinedError) and message.endswith("is undefined"):
            message += f" (the card's variables: {', '.join(VARIABLES)})"
        raise BuildError(f"template error: {message}", file=where, hint=hint) from None
    rendered = "".join(chunks)
    check_front_matter(rendered, path)
    return rendered


def check_front_matter(text: str, card: Path) -> None:
    """The card's YAML front matter as huggingface_hub reads a card's metadata (`RepoCard`):
    closed, YAML, a mapping. Its errors name the line of the rendered card."""
    import yaml
    from huggingface_hub import RepoCard
    from huggingface_hub.repocard import REGEX_YAML_BLOCK

    hint = "fix the YAML between the --- lines (`kbuild card` prints the rendered card)"
    match = REGEX_YAML_BLOCK.search(text)
    if match is None:
        if re.match(r"\s*---[ \t]*(\r\n|\r|\n)", text):
            raise BuildError("the front matter opened by --- on line 1 is never closed", file=card,
                             hint=hint)
        return
    first = text[:match.start(2)].count("\n") + 1  # the line of the rendered card it starts on
    try:
        data = yaml.safe_load(match.group(2))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        line = f"line {first + mark.line} of the rendered card" if mark else "the rendered card"
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise BuildError(f"front matter ({line}) is not valid YAML: {problem}", file=card,
                         hint=hint) from None
    if data is not None and not isinstance(data, dict):
        raise BuildError(f"front matter (line {first} of the rendered card) is a "
                         f"{type(data).__name__}, not a mapping of keys", file=card, hint=hint)
    try:
        RepoCard(text, ignore_metadata_errors=False)
    except Exception as e:  # the client's own reader is the judge
        raise BuildError(f"front matter (line {first} of the rendered card) is refused by "
                         f"huggingface_hub: {e}", file=card, hint=hint) from None


# ----------------------------------------------------------------------------- generated card


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


def generate_card(manifest: manifest_mod.Manifest, repo_id: str, variants: list[BuiltVariant],
                  *, project: Path | None = None) -> str:
    """The card of a project without CARD.md, from the first variant's package (or, with no
    variant, from `project`'s torch-ext/<module>/)."""
    general = manifest.general
    module = general.module_name
    package = variants[0].path if variants else (project or Path(".")) / TORCH_EXT / module
    summary, functions = describe_functions(package / "__init__.py")
    layers = describe_layers(package)
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
    if variants:
        lines += [f"## Variants (version {general.version})", ""]
        lines += [f"- `{v.name}`" for v in variants] + [""]
    sources = [f"- {k}: {getattr(general, k)}" for k in ("upstream", "source") if getattr(general, k)]
    if sources:
        lines += ["## Source", ""] + sources + [""]
    lines += ["Built with pixi-kernel-builder.", ""]
    return "\n".join(lines)


def card_text(project: Path, manifest: manifest_mod.Manifest, repo_id: str,
              variants: list[BuiltVariant]) -> tuple[str, str]:
    """(README text, where it came from: CARD.md, rendered, or "generated")."""
    text = read_card(project)
    if text is not None:
        return render_card(project, manifest, repo_id, text), CARD
    return generate_card(manifest, repo_id, variants, project=project), "generated"


def project_card(project: Path, build_dir: Path | None = None) -> str:
    """`kbuild card`: the card upload would send, without a Hub (a generated card lists the
    variants of the build folder, if any)."""
    project = project.resolve()
    manifest = manifest_mod.load(project)
    text = read_card(project)
    if text is not None:
        return render_card(project, manifest, None, text)
    repo_id = manifest.general.hub.repo_id
    if not repo_id:
        raise BuildError("no CARD.md, and no repo id for a generated card",
                         file=project / MANIFEST, key="general.hub.repo-id",
                         hint="set it, or write a CARD.md")
    folder = Layout.of(project, build_dir).build_dir
    variants = [v for v, _ in map(BuiltVariant.read, variant_dirs(folder, built=True))]
    return generate_card(manifest, repo_id, [v for v in variants if v is not None],
                         project=project)


def check_card(project: Path) -> str | None:
    """`kbuild check`: CARD.md renders and its front matter reads (BuildError otherwise); what
    was checked, None without a CARD.md."""
    project = project.resolve()
    text = read_card(project)
    if text is None:
        return None
    render_card(project, manifest_mod.load(project), None, text)
    return f"{CARD}: renders; its front matter is valid"


def write_card(path: Path, text: str) -> None:
    """`kbuild card --output`: the whole card or nothing (written beside it, renamed over it)."""
    try:
        write_atomic(path, text)
    except OSError as e:
        raise BuildError(f"cannot write it: {e.strerror or e}", file=path) from None
