"""A PEP 751 lock file as `kbuild lock` writes it (`pylock.<name>.toml`), read and validated.

A lock is data, never configuration: every field is validated before use (`LockFile`: names,
versions and markers parsed by `packaging`, hashes 64 hex digits, no control characters), and
its markers are evaluated here rather than handed on. A `[tool.kbuild]` table records what the
lock was resolved from (requirements, indexes, Python, platform) and their hash.
"""

from __future__ import annotations

import hashlib
import platform as host
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from packaging.markers import InvalidMarker, Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, StringConstraints,
                      ValidationError, field_validator, model_validator)

from ..core.errors import BuildError

# uv's names for the platforms a lock is resolved for (glibc 2.28: the manylinux floor of variants).
PLATFORM_TAGS = {"linux-64": "x86_64-manylinux_2_28", "linux-aarch64": "aarch64-manylinux_2_28"}
HOST_PLATFORMS = {"x86_64": "linux-64", "aarch64": "linux-aarch64"}


def host_platform() -> str:
    return HOST_PLATFORMS.get(host.machine(), f"linux-{host.machine()}")


# --- reading: every field of a lock is checked before anything uses it -------------------------

Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]


def _name(value: str) -> str:
    try:
        ok = Requirement(value).name == value == canonicalize_name(value)
    except InvalidRequirement:
        ok = False
    if not ok:
        raise ValueError(f"{value!r} is not a normalized package name (PEP 503)")
    return value


def _version(value: str) -> str:
    try:
        ok = str(Version(value)) == value
    except InvalidVersion:
        ok = False
    if not ok:
        raise ValueError(f"{value!r} is not a normalized version (PEP 440)")
    return value


def _parses_as(parse, error: type[Exception], what: str):
    """A validator: the value unchanged if `parse` accepts it, else "'value' is not WHAT"."""
    def check(value: str) -> str:
        try:
            parse(value)
        except error:
            raise ValueError(f"{value!r} is not {what}") from None
        return value
    return check


_marker = _parses_as(Marker, InvalidMarker, "an environment marker (PEP 508)")
_requirement = _parses_as(Requirement, InvalidRequirement, "a requirement (PEP 508)")
_specifiers = _parses_as(SpecifierSet, InvalidSpecifier, "a version specifier (PEP 440)")


def _web_url(value: str) -> str:
    if urlsplit(value).scheme not in ("https", "http") or not urlsplit(value).netloc:
        raise ValueError(f"{value!r} is not an http(s) URL")
    return value


class _Shape(BaseModel):
    # Keys the builder does not read (upload-time, size, …) are allowed and ignored.
    model_config = ConfigDict(extra="allow", strict=True, frozen=True, populate_by_name=True)


class Hashes(_Shape):
    sha256: Sha256


class LockedFile(_Shape):
    """A wheel or sdist of a locked package: what matters is its hash."""
    url: Annotated[str, AfterValidator(_web_url)] | None = None
    hashes: Hashes


class Package(_Shape):
    name: Annotated[str, AfterValidator(_name)]
    version: Annotated[str, AfterValidator(_version)]
    marker: Annotated[str, AfterValidator(_marker)] | None = None
    wheels: list[LockedFile] = []
    sdist: LockedFile | None = None

    @model_validator(mode="after")
    def _has_files(self) -> "Package":
        if not self.wheels and self.sdist is None:
            raise ValueError(f"{self.name} has no wheel or sdist, so no sha256 hash to check")
        return self

    @property
    def hashes(self) -> list[str]:
        files = self.wheels + ([self.sdist] if self.sdist else [])
        return list(dict.fromkeys(f.hashes.sha256 for f in files))

    def applies_here(self) -> bool:
        """Whether its marker holds for the interpreter running kbuild (that of the venvs)."""
        return self.marker is None or Marker(self.marker).evaluate()


class Record(_Shape):
    """`[tool.kbuild]`: the inputs the lock was resolved from (kbuild lock writes them)."""
    environment: Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9.-]{0,99}$")]
    platform: Literal[tuple(PLATFORM_TAGS)]  # type: ignore[valid-type]
    python: Annotated[str, StringConstraints(pattern=r"^\d{1,2}\.\d{1,3}$")]
    requirements: list[Annotated[str, AfterValidator(_requirement)]]
    indexes: list[Annotated[str, AfterValidator(_web_url)]]
    torch_index: bool = Field(alias="torch-index")
    inputs: Annotated[str, StringConstraints(pattern=r"^sha256:[0-9a-f]{64}$")]


class Tool(_Shape):
    kbuild: Record


class LockFile(_Shape):
    """A PEP 751 lock as `kbuild lock` writes it (the fields kbuild reads, typed)."""
    lock_version: Literal["1.0"] = Field(alias="lock-version")
    requires_python: Annotated[str, AfterValidator(_specifiers)] | None = Field(
        None, alias="requires-python")
    packages: list[Package] = Field(min_length=1)
    tool: Tool

    @field_validator("packages")
    @classmethod
    def _one_entry_per_package(cls, packages: list[Package]) -> list[Package]:
        seen: set[str] = set()
        for pkg in packages:
            if pkg.name in seen:
                raise ValueError(f"{pkg.name} is locked twice")
            seen.add(pkg.name)
        return packages


def _key(loc: tuple) -> str:
    """`packages[3].wheels[0].hashes.sha256` from a pydantic error location."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _hidden_character(value: object, key: str = "") -> tuple[str, str] | None:
    """(key, character) of the first character that is not printable (control, format, line
    separator, …) anywhere in a parsed document, its keys too: nothing a lock holds needs one."""
    if isinstance(value, str):
        return None if value.isprintable() else (key, next(c for c in value if not c.isprintable()))
    if isinstance(value, dict):
        for k, v in value.items():
            where = f"{key}.{k}" if key else str(k)
            if found := _hidden_character(k, where) or _hidden_character(v, where):
                return found
    elif isinstance(value, list):
        for i, v in enumerate(value):
            if found := _hidden_character(v, f"{key}[{i}]"):
                return found
    return None


@dataclass(frozen=True)
class Lock:
    path: Path
    name: str
    inputs_hash: str
    torch_index: bool                # resolved with the environment's PyTorch index
    requirements: tuple[str, ...]    # what it was resolved from ([tool.kbuild]), for staleness
    indexes: tuple[str, ...]         # never installed from: the matrix names the indexes
    platform: str
    python: str
    sha256: str                      # of the file: what provenance records
    packages: tuple[Package, ...]

    @property
    def inputs(self) -> dict:
        return {"requirements": list(self.requirements), "indexes": list(self.indexes),
                "python": self.python, "platform": self.platform}

    def requirement_lines(self) -> list[str]:
        """The packages whose markers hold here, as hash-pinned requirements (`name===version
        --hash=sha256:…`, every part validated): installing them resolves nothing. `===`, not
        `==`: `torch==2.13.0` also matches a local `2.13.0+cpu` wheel (a find-links folder may
        hold one), which the installer would then pick and refuse for its hash."""
        lines = []
        for pkg in self.packages:
            try:
                applies = pkg.applies_here()
            except Exception as e:  # noqa: BLE001 - packaging's evaluation errors have no base
                raise BuildError(f"{pkg.name}: its marker cannot be evaluated here ({e})",
                                 file=self.path, key="packages",
                                 hint=f"re-lock it: kbuild lock {self.name}") from None
            if applies:
                lines.append(f"{pkg.name}==={pkg.version} "
                             + " ".join(f"--hash=sha256:{h}" for h in pkg.hashes))
        return lines


_REWRITE = "delete {} and run `kbuild lock` (a lock is written by kbuild, never by hand)"


def parse(text: str, path: Path) -> LockFile:
    """The typed lock in `text`, or one BuildError naming the key that is wrong."""
    hint = _REWRITE.format(path.name)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise BuildError(f"invalid lock: {e}", file=path, hint=hint) from None
    if found := _hidden_character(doc):
        raise BuildError(f"control character {found[1]!r} (not printable)", file=path,
                         key=found[0] or None, hint=hint)
    if not isinstance(doc.get("tool"), dict) or "kbuild" not in doc["tool"]:
        raise BuildError("not a lock written by `kbuild lock`", file=path, key="tool.kbuild",
                         hint=hint)
    try:
        return LockFile.model_validate(doc)
    except ValidationError as e:
        first = e.errors()[0]
        message = first["msg"].removeprefix("Value error, ")
        if first["type"] == "missing":
            message = "a required key is missing"
        raise BuildError(f"invalid lock: {message}", file=path, key=_key(first["loc"]) or None,
                         hint=hint) from None


def read(path: Path) -> Lock:
    try:
        data = path.read_bytes()
        text = data.decode("utf-8")
    except OSError as e:
        raise BuildError(f"cannot read the lock: {e.strerror}", file=path) from None
    except UnicodeDecodeError as e:
        raise BuildError(f"invalid lock: not UTF-8 ({e.reason})", file=path,
                         hint=_REWRITE.format(path.name)) from None
    model = parse(text, path)
    meta = model.tool.kbuild
    return Lock(path=path, name=meta.environment, inputs_hash=meta.inputs,
                torch_index=meta.torch_index, requirements=tuple(meta.requirements),
                indexes=tuple(meta.indexes), platform=meta.platform, python=meta.python,
                sha256="sha256:" + hashlib.sha256(data).hexdigest(), packages=tuple(model.packages))
