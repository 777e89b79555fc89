"""The manifest stage: `build.toml` → one typed, validated `Manifest`.

    model.py   the pydantic model (every key upstream's edition 5 knows, with descriptions)
    forms.py   the forms of values (names, versions, capabilities, URLs, …) and known names
    paths.py   source paths: inside the project, nothing compiled twice into one variant

Every problem becomes one `BuildError` naming the file and the key; nothing else escapes `load`.
"""

from __future__ import annotations

import difflib
import json
import re
import tomllib
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from .. import editions
from ..errors import BuildError
from ..layout import MANIFEST
from .forms import (BACKENDS, CAPABILITY_RE, COMPILED_SUFFIXES, KERNEL_DEPENDS, NAME_RE,
                    PYTHON_DEPENDS)
from .model import (CudaGeneral, General, Hub, Kernel, KernelDependency, Manifest, NeuronGeneral,
                    Torch, TorchNoarch, TpuGeneral, TvmFfi, XpuGeneral)
from .paths import check_paths, inside, resolve_source
from .upstream import differences as upstream_differences

__all__ = ["BACKENDS", "CAPABILITY_RE", "COMPILED_SUFFIXES", "KERNEL_DEPENDS", "NAME_RE",
           "PYTHON_DEPENDS", "CudaGeneral", "General", "Hub", "Kernel", "KernelDependency",
           "Manifest", "NeuronGeneral", "Torch", "TorchNoarch", "TpuGeneral", "TvmFfi",
           "XpuGeneral", "inside", "load", "read_raw", "resolve_source", "validate"]

REFERENCE = "docs/authoring.md (build.toml reference)"
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def read_raw(project: Path) -> dict[str, Any]:
    """The parsed TOML of `project/build.toml` (a file of the project, not a link out of it)."""
    project = project.resolve()
    path = project / MANIFEST
    if not path.is_file():
        raise BuildError("no build.toml found", file=path,
                         hint="run the command in a kernel project or pass its directory")
    if not inside(project, path):
        raise BuildError("build.toml is a link to a file outside the project", file=path,
                         hint="make build.toml a file of the project")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise BuildError(f"malformed TOML: {e}", file=path, hint="fix the TOML syntax") from None
    except UnicodeDecodeError:
        raise BuildError("not UTF-8 text", file=path, hint="save build.toml as UTF-8") from None
    except OSError as e:
        raise BuildError(f"cannot read it: {e.strerror or e}", file=path,
                         hint="check the file's permissions") from None


def toml_key(parts: tuple[Any, ...]) -> str:
    """`general.hub.repo-id`, `kernel."odd name".src`, `general.backends[2]`."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
            continue
        text = str(part)
        text = text if _BARE_KEY.match(text) else json.dumps(text)
        out += f".{text}" if out else text
    return out


def toml_type(value: Any) -> str:
    """The TOML name of a parsed value's type, with short values shown."""
    names = {bool: "boolean", int: "integer", float: "float", str: "string", list: "array",
             dict: "table"}
    name = next((n for t, n in names.items() if isinstance(value, t)), "date or time")
    if isinstance(value, bool):
        return f"{name} {str(value).lower()}"
    if isinstance(value, (int, float, str)) and len(repr(value)) <= 40:
        return f"{name} {value!r}"
    return name


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model class whose fields an error at `loc` (a key in it) belongs to."""
    model: Any = Manifest
    for part in loc:
        if isinstance(model, type) and issubclass(model, BaseModel):
            field = next((f for n, f in model.model_fields.items()
                          if part in (n, f.alias)), None)
            if field is None:
                return None
            model = field.annotation
        elif typing.get_origin(model) is dict:
            model = typing.get_args(model)[1]
        else:
            return None
        while not (isinstance(model, type) and issubclass(model, BaseModel)):
            args = [a for a in typing.get_args(model) if a is not type(None)]
            if typing.get_origin(model) is dict or not args:
                break
            model = args[0]
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _known_keys(loc: tuple[Any, ...]) -> list[str]:
    model = _model_at(loc)
    return [f.alias or n for n, f in model.model_fields.items()] if model else []


def _error(err: dict, path: Path) -> BuildError:
    loc = tuple(p for p in err["loc"] if not str(p).startswith("function-"))
    ctx = err.get("ctx") or {}
    if ctx.get("key"):
        key = ctx["key"]
    else:
        key = toml_key(loc + ((ctx["subkey"],) if ctx.get("subkey") is not None else ()))
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"].endswith("_type") or err["type"] in ("literal_error", "model_type"):
        msg = f"{msg} (got {toml_type(err.get('input'))})"
    if err["type"] == "extra_forbidden":
        known = _known_keys(loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
        msg = f"unknown key `{toml_key(loc[-1:])}`" + (f" (did you mean `{close[0]}`?)"
                                                        if close else "")
        hint = (f"keys here: {', '.join(known)}; see {REFERENCE}" if known
                else f"remove it; see {REFERENCE}")
    elif err["type"] == "missing":
        msg, hint = "required key is missing", f"add it; see {REFERENCE}"
    else:
        hint = ctx.get("hint") or "fix the value"
    return BuildError(msg, file=path, key=key or None, hint=hint)


def validate(data: dict[str, Any], path: Path) -> Manifest:
    """The `Manifest` of upgraded TOML data, or one `BuildError` (unknown keys reported first)."""
    try:
        return Manifest.model_validate(data)
    except ValidationError as e:
        errors = e.errors(include_url=False)
        first = next((x for x in errors if x["type"] == "extra_forbidden"), errors[0])
        raise _error(first, path) from None


def _edition(raw: dict[str, Any], path: Path) -> int:
    general = raw.get("general")
    if not isinstance(general, dict) or "edition" not in general:
        return editions.detect_edition(raw)
    edition = general["edition"]
    if type(edition) is not int:
        raise BuildError(f"expected an integer, got {toml_type(edition)}", file=path,
                         key="general.edition",
                         hint=f"write `edition = {editions.CURRENT_EDITION}`")
    if edition > editions.CURRENT_EDITION:
        raise BuildError(f"edition {edition} is newer than this builder supports "
                         f"({editions.CURRENT_EDITION})", file=path, key="general.edition",
                         hint="upgrade pixi-kernel-builder")
    if edition != editions.CURRENT_EDITION:
        raise BuildError(f"there is no edition {edition} with an `edition` key", file=path,
                         key="general.edition", hint=f"write `edition = {editions.CURRENT_EDITION}`"
                         " (older editions have no `edition` key)")
    return edition


def load(project: Path, *, warn=None) -> Manifest:
    """Parses, upgrades and validates `project/build.toml`, including every source path."""
    project = project.resolve()
    path = project / MANIFEST
    raw = read_raw(project)
    edition = _edition(raw, path)
    upgraded, notes = editions.upgrade(raw)
    if notes and warn and edition < editions.QUIET_FROM:  # edition 4 is read as upstream does
        warn(f"{path}: edition {edition} manifest upgraded in memory ({'; '.join(notes)}); "
             "run `kbuild update-build` to rewrite it")
    manifest = validate(upgraded, path)
    check_paths(manifest, project, path)
    for line in upstream_differences(manifest, path) if warn else ():
        warn(line)
    return manifest
