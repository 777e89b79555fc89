"""The shape of a variant's metadata.json: the JSON type of every key the `kernels` loader and
kbuild read, checked before anything reads them (so a file of the wrong shape is a problem
that names the key, never a traceback). Which keys are required is `check`'s business; the
loader's own parser still judges the values (name grammar, commit ids, backends)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .layout import METADATA

# Fields default to None without being Optional: a key may be absent, but `null` is refused,
# as the loader refuses it (except where the loader takes null: provenance, digest, archs, …).


class _Shape(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, populate_by_name=True)


class Digest(_Shape):
    algorithm: str
    files: dict[str, str]


class KernelGit(_Shape):
    commit: str
    dirty: bool


class BuilderGit(_Shape):
    version: str
    commit: str = None  # type: ignore[assignment]
    dirty: bool = None  # type: ignore[assignment]


class Provenance(_Shape):
    kernel_builder: BuilderGit = Field(alias="kernel-builder")
    kernel: KernelGit | None = None


class Backend(_Shape):
    type: str
    archs: list[str] | None = None


class VariantMetadata(_Shape):
    name: str = None  # type: ignore[assignment]
    id: str = None  # type: ignore[assignment]
    version: int = Field(None, ge=0)  # type: ignore[assignment]
    license: str = None  # type: ignore[assignment]
    python_depends: list[str] = Field(None, alias="python-depends")  # type: ignore[assignment]
    kernel_depends: list[dict[str, Any]] = Field(None, alias="kernel-depends")  # type: ignore[assignment]
    backend: Backend = None  # type: ignore[assignment]
    digest: Digest | None = None
    provenance: Provenance | None = None
    upstream: str | None = None
    source: str | None = None


_EXPECTED = {"dict_type": "an object", "model_type": "an object", "model_attributes_type": "an object",
             "string_type": "a string", "int_type": "an integer", "bool_type": "true or false",
             "list_type": "a list"}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return {dict: "an object", list: "a list", str: "a string", int: "a number",
            float: "a number"}.get(type(value), type(value).__name__)


def _key(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.replace("-", "").replace("_", "").isalnum() and part.isascii():
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part)}]"
    return out


class MetadataProblem(NamedTuple):
    code: str  # metadata.missing | metadata.json | metadata.shape
    key: str  # the offending key ("" for the whole file)
    message: str


def shape_problems(meta: Any) -> list[MetadataProblem]:
    """One problem per key of the wrong JSON type; [] when the shape is right."""
    if not isinstance(meta, dict):
        return [MetadataProblem("metadata.shape", "",
                                f"metadata.json must be a JSON object, not {_json_type(meta)}")]
    try:
        VariantMetadata.model_validate(meta)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            key = _key(err["loc"])
            if err["type"] == "missing":
                text = "is missing"
            elif err["type"] in _EXPECTED:
                text = f"must be {_EXPECTED[err['type']]}, not {_json_type(err.get('input'))}"
            else:
                text = err["msg"].lower()
            problems.append(MetadataProblem("metadata.shape", key, f"metadata.json: `{key}` {text}"))
        return problems
    return []


def read(variant: Path) -> tuple[dict | None, list[MetadataProblem]]:
    """(metadata, []) of a variant, or (None, problems) when it is missing, not JSON or of the
    wrong shape."""
    path = variant / METADATA
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, [MetadataProblem("metadata.missing", "", "metadata.json is missing")]
    except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        return None, [MetadataProblem("metadata.json", "", f"metadata.json is not valid JSON: {exc}")]
    problems = shape_problems(meta)
    return (None, problems) if problems else (meta, [])
