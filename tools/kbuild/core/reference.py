"""The build.toml reference, generated from the manifest model (so the docs cannot drift).

    python -m kbuild.core.reference docs/authoring.md           # rewrite the marked section
    python -m kbuild.core.reference --check docs/authoring.md   # exit 1 when it is stale
"""

from __future__ import annotations

import json
import sys
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from .manifest import Manifest

BEGIN = ("<!-- build.toml reference: generated from the manifest model by "
         "`python -m kbuild.core.reference docs/authoring.md`; do not edit by hand -->")
END = "<!-- end of the build.toml reference -->"


@dataclass
class Section:
    title: str                      # "[general.hub]"
    intro: str = ""
    rows: list[tuple[str, str, str, str]] = field(default_factory=list)  # key, type, default, text


def _args(tp) -> tuple:
    return typing.get_args(tp)


def _is_union(tp) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def _model(tp) -> type[BaseModel] | None:
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


def _strip_none(tp):
    """X for `X | None` and `Annotated[X, ...]`."""
    if typing.get_origin(tp) is typing.Annotated:
        return _strip_none(_args(tp)[0])
    if _is_union(tp):
        rest = [a for a in _args(tp) if a is not type(None)]
        return rest[0] if len(rest) == 1 else typing.Union[tuple(rest)]
    return tp


def type_text(tp) -> str:
    tp = _strip_none(tp)
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        values = [f"`{json.dumps(a)}`" for a in _args(tp)]
        return values[0] if len(values) == 1 else "one of " + ", ".join(values)
    if origin is list:
        return f"array of {type_text(_args(tp)[0])}" if _args(tp) else "array"
    if origin is dict:
        return f"table of {type_text(_args(tp)[1])}" if _args(tp) else "table"
    if _is_union(tp):
        return " or ".join(type_text(a) for a in _args(tp))
    if typing.get_origin(tp) is typing.Annotated:
        return type_text(_args(tp)[0])
    if _model(tp):
        return "table"
    return {str: "string", int: "integer", float: "number", bool: "boolean",
            typing.Any: "any value"}.get(tp, getattr(tp, "__name__", str(tp)))


def _constraints(info) -> list[str]:
    words = []
    for m in info.metadata:
        for attr, text in (("ge", "≥ {}"), ("gt", "> {}"), ("le", "≤ {}"), ("lt", "< {}"),
                           ("min_length", "at least {} item(s)"), ("max_length", "at most {}"),
                           ("pattern", "matches `{}`")):
            value = getattr(m, attr, None)
            if value is not None:
                words.append(text.format(value))
    return words


def default_text(info) -> str:
    if info.is_required():
        return "**required**"
    value = info.default_factory() if info.default_factory is not None else info.default
    if value is None or value is PydanticUndefined:
        return "not set"
    if isinstance(value, BaseModel):
        return "—"
    return f"`{json.dumps(value)}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def sections(model: type[BaseModel], title: str = "", intro: str = "") -> list[Section]:
    """The model's own keys as one section, followed by one section per nested table."""
    own = Section(title, intro)
    nested: list[Section] = []
    for name, info in model.model_fields.items():
        key = info.alias or name
        tp = _strip_none(info.annotation)
        origin = typing.get_origin(tp)
        about = " ".join(w for w in [info.description or "", *_constraints(info)] if w)
        where = f"{title[1:-1]}.{key}" if title else key
        needed = about or ("Required." if info.is_required() else "Optional.")
        if _model(tp):
            doc = " ".join((tp.__dict__.get("__doc__") or "").split())
            nested += sections(tp, f"[{where}]", " ".join(w for w in (needed, doc) if w))
        elif origin is list and _args(tp) and _model(_args(tp)[0]):
            nested += sections(_args(tp)[0], f"[[{where}]]",
                               f"An array of tables (repeat the header per entry). {about}".strip())
        elif origin is dict and _args(tp) and _model(_args(tp)[1]):
            nested += sections(_args(tp)[1], f"[{where}.<name>]",
                               f"One table per entry, any `<name>`. {about}".strip())
        elif not title and origin is dict:  # a top-level table of free-form keys
            nested.append(Section(f"[{where}]", f"{needed} A table of any keys."))
        else:
            own.rows.append((key, type_text(info.annotation), default_text(info), about))
    return ([own] if own.rows or own.intro else []) + nested


def render(model: type[BaseModel] = Manifest) -> str:
    """Markdown: one heading and one table per build.toml table."""
    out = []
    for s in sections(model):
        heading = f"`{s.title}`" if s.title else "Top level"
        out += [f"#### {heading}", ""]
        if s.intro:
            out += [s.intro, ""]
        if s.rows:
            out += ["| key | type | default | description |", "|---|---|---|---|"]
            out += [f"| `{k}` | {_cell(t)} | {_cell(d)} | {_cell(a)} |" for k, t, d, a in s.rows]
            out.append("")
    return "\n".join(out).rstrip() + "\n"


def splice(document: str, body: str) -> str:
    """`document` with the text between the markers replaced by `body`."""
    start, end = document.find(BEGIN), document.find(END)
    if start < 0 or end < start:
        raise ValueError("the document has no build.toml reference markers")
    return document[:start + len(BEGIN)] + "\n\n" + body + "\n" + document[end:]


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    check = "--check" in args
    paths = [Path(a) for a in args if a != "--check"]
    if not paths:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    stale = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        new = splice(text, render())
        if new != text:
            stale.append(path)
            if not check:
                path.write_text(new, encoding="utf-8")
    for path in stale:
        print(f"{path}: {'stale' if check else 'rewritten'}", file=sys.stderr)
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
