"""The typed metadata.json of a built variant: every key the `kernels` loader and kbuild read,
with its JSON type, checked before anything reads them (so a file of the wrong shape is a
problem that names the key, never a traceback). The required keys are required here, and
nowhere else; the loader's own parser still judges the values (name grammar, commit ids).
Assemble writes this model; check, upload, to-wheel and the card read it (core/built.py)."""

from __future__ import annotations

import json
from typing import Annotated, Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError

from .backend import Backend

# Optional fields default to None without being Optional: a key may be absent, but `null` is
# refused, as the loader refuses it (except where the loader takes null: provenance, digest, …).


class _Shape(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, populate_by_name=True, frozen=True)


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


class Environment(_Shape):
    """The matrix environment a variant was built in, and the hashes of its locks (null: none)."""
    name: str
    lock: str | None = None
    toolkit_lock: str | None = Field(None, alias="toolkit-lock")


class Dependency(_Shape):
    """A header tree compiled in (CUTLASS): which release (version, tag, tree digest), the
    source its headers came from (a wheel: package, version, wheel_sha256; or the tag archive's
    url), files the builder generated in it (path → sha256), and what it stands in for when
    substituted."""
    dependency: str
    cutlass: str
    tree_sha256: str
    tag: str = None  # type: ignore[assignment]
    package: str = None  # type: ignore[assignment]
    version: str = None  # type: ignore[assignment]
    wheel_sha256: str = None  # type: ignore[assignment]
    url: str = None  # type: ignore[assignment]
    generated: dict[str, str] = None  # type: ignore[assignment]
    substitutes: str = None  # type: ignore[assignment]


class LocalBuild(_Shape):
    """A build for the GPUs at hand only (`--cuda-capabilities`): never published."""
    cuda_capabilities: list[str] = Field(alias="cuda-capabilities")


class SplitCompile(_Shape):
    """nvcc's --split-compile of the device code in `parts` (KBUILD_NVCC_SPLIT, or a local
    build's default): its kernels may run slower (up to 1.58x measured), so a release build
    with it is never published."""
    parts: int


class Provenance(_Shape):
    kernel_builder: BuilderGit = Field(alias="kernel-builder")
    kernel: KernelGit | None = None
    environment: Environment | None = None
    dependencies: list[Dependency] | None = None
    local_build: LocalBuild | None = Field(None, alias="local-build")
    split_compile: SplitCompile | None = Field(None, alias="split-compile")


class BackendInfo(_Shape):
    type: Annotated[Backend, Strict(False)]  # its name, one of the closed set
    archs: list[str] | None = None


class VariantMetadata(_Shape):
    name: str
    id: str
    version: int = Field(ge=0)
    license: str
    python_depends: list[str] = Field(alias="python-depends")
    kernel_depends: list[dict[str, Any]] = Field(alias="kernel-depends")
    backend: BackendInfo
    upstream: str | None = None
    source: str | None = None
    digest: Digest | None = None
    provenance: Provenance | None = None

    def to_json(self) -> str:
        """metadata.json's text: the keys that were set, in this order."""
        data = self.model_dump(mode="json", by_alias=True, exclude_unset=True)
        return json.dumps(data, indent=2) + "\n"


_EXPECTED = {"dict_type": "an object", "model_type": "an object", "model_attributes_type": "an object",
             "string_type": "a string", "int_type": "an integer", "bool_type": "true or false",
             "list_type": "a list", "enum": "a backend (" + ", ".join(Backend.names()) + ")"}


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
    code: str  # metadata.missing | metadata.json | metadata.shape | metadata.missing-key
    key: str  # the offending key ("" for the whole file)
    message: str


def _problem(err: dict) -> MetadataProblem:
    key = _key(err["loc"])
    if err["type"] == "missing":
        return MetadataProblem("metadata.missing-key", key,
                               f"metadata.json: missing required key `{key}`")
    if err["type"] in _EXPECTED:
        text = f"must be {_EXPECTED[err['type']]}, not {_json_type(err.get('input'))}"
    else:
        text = err["msg"].lower()
    return MetadataProblem("metadata.shape", key, f"metadata.json: `{key}` {text}")


def validate(meta: Any) -> tuple[VariantMetadata | None, list[MetadataProblem]]:
    """(metadata, []) of parsed JSON, or (None, one problem per key of the wrong shape)."""
    if not isinstance(meta, dict):
        return None, [MetadataProblem("metadata.shape", "",
                                      f"metadata.json must be a JSON object, not {_json_type(meta)}")]
    try:
        return VariantMetadata.model_validate(meta), []
    except ValidationError as exc:
        return None, [_problem(err) for err in exc.errors()]


def parse(text: str) -> tuple[VariantMetadata | None, list[MetadataProblem]]:
    """(metadata, []) of metadata.json's text, or (None, problems) when it is not JSON or of
    the wrong shape."""
    try:
        meta = json.loads(text)
    except ValueError as exc:
        return None, [MetadataProblem("metadata.json", "", f"metadata.json is not valid JSON: {exc}")]
    return validate(meta)
