"""Locks for the PyPI realisation: a PEP 751 `pylock.<name>.toml` per environment and toolkit.

`kbuild lock` has uv resolve what an environment installs (torch and the environment's other PyPI
requirements; for a toolkit, NVIDIA's wheels) for one platform and Python into a pylock.toml with
exact versions and sha256 hashes, under `locks/<platform>/` next to the pixi.toml. A `[tool.kbuild]`
table records the inputs (requirements, indexes, Python, platform) and their hash: when pixi.toml
changes them, the lock is stale. Realising from a lock (envs.py) installs exactly its files, in
hash-checking mode, with no resolution.

A lock is data, never configuration: every field is validated before use (`LockFile`: names,
versions and markers parsed by `packaging`, hashes 64 hex digits, no control characters), its
markers are evaluated here rather than handed on, and the indexes installed from are the
matrix's, never the lock's. `kbuild lock --check` re-derives each lock's package set (`verify`).

Locks name public sources only: they are resolved against remote indexes (PyPI, the environment's
PyTorch index), and a wheel found only in a local folder (pip's find-links) is recorded at the
PyTorch index the environment names, where such labelled wheels are published.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform as host
import re
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import quote, unquote, urlparse, urlsplit

import tomlkit
from packaging.markers import InvalidMarker, Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, StringConstraints,
                      ValidationError, field_validator, model_validator)

from ..core.errors import BuildError
from ..core.runner import capture
from .matrix import EnvSpec, Matrix

# uv's names for the platforms a lock is resolved for (glibc 2.28: the manylinux floor of variants).
PLATFORM_TAGS = {"linux-64": "x86_64-manylinux_2_28", "linux-aarch64": "aarch64-manylinux_2_28"}
HOST_PLATFORMS = {"x86_64": "linux-64", "aarch64": "linux-aarch64"}


def host_platform() -> str:
    return HOST_PLATFORMS.get(host.machine(), f"linux-{host.machine()}")


def python_minor(spec: EnvSpec) -> str:
    """The Python minor an environment is locked for: its pixi `python` spec, else this one's."""
    m = re.match(r"^\s*(?:==)?\s*(\d+)\.(\d+)", spec.python or "")
    return f"{m.group(1)}.{m.group(2)}" if m else "%d.%d" % sys.version_info[:2]


@dataclass(frozen=True)
class Target:
    """One thing to lock: an environment's own packages, or a toolkit's."""
    name: str                        # "torch214-cu130", "toolkit-cu130"
    requirements: tuple[str, ...]
    python: str                      # "3.11"
    platform: str                    # "linux-64"
    indexes: tuple[str, ...] = ()    # extra indexes resolved (and installed) from
    torch_index: str | None = None   # where the environment's labelled torch wheels are published

    @property
    def inputs(self) -> dict:
        return {"requirements": list(self.requirements), "indexes": list(self.indexes),
                "python": self.python, "platform": self.platform}

    @property
    def inputs_hash(self) -> str:
        text = json.dumps(self.inputs, sort_keys=True)
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def env_target(spec: EnvSpec, platform: str = "linux-64", torch_index: bool = False) -> Target:
    if torch_index and spec.torch_index:
        reqs, indexes = [spec.torch_index_requirement()], (spec.torch_index,)
    else:
        reqs, indexes = [spec.torch_requirement], ()
    return Target(spec.name, tuple(reqs + list(spec.pypi_extra)), python_minor(spec), platform,
                  indexes, spec.torch_index)


def toolkit_target(spec: EnvSpec, platform: str = "linux-64") -> Target | None:
    if not spec.toolkit_wheels:
        return None
    return Target(f"toolkit-{spec.compute}", spec.toolkit_wheels, python_minor(spec), platform)


def lock_path(folder: Path, platform: str, name: str) -> Path:
    return folder / platform / f"pylock.{name}.toml"


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


def _marker(value: str) -> str:
    try:
        Marker(value)
    except InvalidMarker:
        raise ValueError(f"{value!r} is not an environment marker (PEP 508)") from None
    return value


def _requirement(value: str) -> str:
    try:
        Requirement(value)
    except InvalidRequirement:
        raise ValueError(f"{value!r} is not a requirement (PEP 508)") from None
    return value


def _specifiers(value: str) -> str:
    try:
        SpecifierSet(value)
    except InvalidSpecifier:
        raise ValueError(f"{value!r} is not a version specifier (PEP 440)") from None
    return value


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


@dataclass(frozen=True)
class LockState:
    target: Target
    path: Path
    state: str                       # current | stale | missing
    lock: Lock | None = None
    env: str = ""                    # the environment asking (a toolkit serves several)

    @property
    def problem(self) -> str:
        return (f"{self.env}: {self.path.name} no longer matches its environment in pixi.toml"
                if self.state == "stale" else "")

    @property
    def fix(self) -> str:
        return f"re-lock it: kbuild lock {self.env}"


def matches(lock: Lock, target: Target) -> bool:
    """Whether `lock` records exactly `target`'s inputs (its name, requirements, indexes, Python
    and platform, and their hash): a lock whose record was edited is stale, not trusted."""
    return (lock.name == target.name and lock.inputs == target.inputs
            and lock.inputs_hash == target.inputs_hash and lock.torch_index == bool(target.indexes))


def states(spec: EnvSpec, platform: str | None = None) -> list[LockState]:
    """The toolkit's lock state (if any) and the environment's, against pixi.toml as it is now.
    A lock that is not well-formed is a BuildError."""
    platform = platform or host_platform()
    if spec.locks is None:
        return []
    found = []
    env_path = lock_path(spec.locks, platform, spec.name)
    env_lock = read(env_path) if env_path.is_file() else None
    torch_index = env_lock.torch_index if env_lock else False
    for target in (toolkit_target(spec, platform), env_target(spec, platform, torch_index)):
        if target is None:
            continue
        path = lock_path(spec.locks, platform, target.name)
        if not path.is_file():
            found.append(LockState(target, path, "missing", env=spec.name))
            continue
        lock = env_lock if path == env_path else read(path)
        found.append(LockState(target, path, "current" if matches(lock, target) else "stale",
                               lock, spec.name))
    return found


def check(matrix: Matrix, platform: str | None = None, inst=None) -> tuple[list[str], list[str]]:
    """(problems, unlocked): stale, malformed and orphaned locks; what has no lock. With an
    installer (`kbuild lock --check`), every current lock is also re-derived from its inputs
    and compared with what it holds (`verify`)."""
    platform = platform or host_platform()
    problems, notes, wanted, verified = [], [], set(), set()
    for spec in matrix.envs:
        try:
            found = states(spec, platform)
        except BuildError as e:
            wanted |= {lock_path(spec.locks, platform, n).name for n in (spec.name, f"toolkit-{spec.compute}")}
            problems.append(f"{spec.name}: {e}".replace("\n  hint: ", ": "))
            continue
        for st in found:
            wanted.add(st.path.name)
            if st.state == "stale":
                problems.append(f"{st.problem}: {st.fix}")
            elif st.state == "missing":
                notes.append(st.target.name)
            elif inst is not None and st.path not in verified:
                verified.add(st.path)
                problems += [f"{st.env}: {st.path.name}: {p}: {st.fix}" for p in verify(st, inst)]
    folder = matrix.locks / platform
    for path in sorted(folder.glob("pylock.*.toml")) if folder.is_dir() else []:
        if path.name not in wanted:
            problems.append(f"{path.name}: no environment of {matrix.path.name} uses it: delete it")
    return problems, list(dict.fromkeys(notes))


def verify(state: LockState, inst, timeout: float = 900) -> list[str]:
    """How a current lock differs from what its inputs resolve to now, the lock's own pins
    preferred (so a newer release elsewhere is no difference): a package it adds or lacks, a
    version, a marker, or a hash that is not one of that release's files on the index."""
    assert state.lock is not None
    lock, target = state.lock, state.target
    pins = [f"{p.name}=={p.version}" for p in lock.packages]
    # The sources `kbuild lock` resolves from; then, for a torch wheel recorded at the
    # environment's PyTorch index (found in a local folder when locked), that index's torch page.
    sources: list[list[str]] = [[]]
    base = (target.torch_index or "").rstrip("/") + "/"
    torch = next((p for p in lock.packages if p.name == "torch"), None)
    if target.torch_index and not target.indexes and torch and any(
            (w.url or "").startswith(base) for w in torch.wheels):
        sources.append([base + "torch/"])
    for links in sources:
        try:
            text = _compile(target, inst, timeout, constraints=pins, find_links=links)
            break
        except BuildError as e:
            failure = e.message
    else:
        return [f"cannot be re-derived from its inputs here ({failure})"]
    return differences(lock.packages, parse(text, state.path).packages)


def differences(locked: tuple[Package, ...] | list[Package],
                derived: tuple[Package, ...] | list[Package]) -> list[str]:
    """What a lock holds that a resolution of its inputs does not: a package more or less, another
    version or marker, or a hash that is none of that release's files. (A lock may hold fewer of
    a release's files than the index has: hash-checking then admits fewer, never others.)"""
    mine, theirs = {p.name: p for p in locked}, {p.name: p for p in derived}
    found = [f"{name} {mine[name].version} is not part of what its inputs resolve to"
             for name in sorted(mine.keys() - theirs.keys())]
    found += [f"{name} {theirs[name].version} is missing" for name in sorted(theirs.keys() - mine.keys())]
    for name in sorted(mine.keys() & theirs.keys()):
        ours, resolved = mine[name], theirs[name]
        if ours.version != resolved.version:
            found.append(f"{name} is locked at {ours.version}, its inputs resolve to "
                         f"{resolved.version}")
            continue
        if _normal_marker(ours.marker) != _normal_marker(resolved.marker):
            found.append(f"{name}: marker {ours.marker!r} differs from the resolution's "
                         f"{resolved.marker!r}")
        unknown = sorted(set(ours.hashes) - set(resolved.hashes))
        if unknown:
            found.append(f"{name} {ours.version}: sha256 {unknown[0]} is not a file of it on the "
                         "index")
    return found


def _normal_marker(marker: str | None) -> str | None:
    return None if marker is None else str(Marker(marker))


# --- writing ------------------------------------------------------------------------------------

def _compile(target: Target, inst, timeout: float, constraints: list[str] = (),
             find_links: list[str] = ()) -> str:
    """`target` resolved by uv into pylock text, made public, with its `[tool.kbuild]` record."""
    if inst.kind != "uv":
        raise BuildError("`kbuild lock` needs uv", hint="pip install uv")
    if target.platform not in PLATFORM_TAGS:
        raise BuildError(f"cannot lock for {target.platform}",
                         hint=f"platforms: {', '.join(PLATFORM_TAGS)}")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "pylock.toml"
        extra = [arg for link in find_links for arg in ("--find-links", link)]
        if constraints:
            (Path(tmp) / "pins.txt").write_text("\n".join(constraints) + "\n")
            extra += ["--constraint", str(Path(tmp) / "pins.txt")]
        cmd = [inst.uv, "pip", "compile", "-", "--quiet", "--format", "pylock.toml", "--no-header",
               "--python-version", target.python, "--python-platform", PLATFORM_TAGS[target.platform],
               "-o", str(out), *inst.lock_args(list(target.indexes)), *extra]
        proc = capture(cmd, input="\n".join(target.requirements) + "\n", env=inst._env(),
                       timeout=timeout)
        if proc.returncode != 0:
            from .installer import _last_error
            raise BuildError(f"{target.name}: {_last_error(proc.stderr)}",
                             hint="`kbuild envs --list` says what is missing here")
        return _publish(out.read_text(), target)


def resolve(target: Target, folder: Path, inst, timeout: float = 900) -> Lock:
    """Resolves `target` with uv into its pylock file (written atomically) and returns it."""
    text = _compile(target, inst, timeout)
    path = lock_path(folder, target.platform, target.name)
    parse(text, path)  # what uv wrote is held to the same rules as any lock read
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp_path = path.with_suffix(f".{os.getpid()}.tmp")
    tmp_path.write_text(text)
    os.replace(tmp_path, path)
    return read(path)


def _publish(text: str, target: Target) -> str:
    """uv's pylock with local file URLs made public and the `[tool.kbuild]` record added."""
    doc = tomlkit.parse(text)
    for pkg in doc.get("packages", []):
        if "sdist" in pkg and pkg["sdist"].get("url", "").startswith("file:"):
            del pkg["sdist"]
        for wheel in pkg.get("wheels", []):
            url = wheel.get("url", "")
            if not url.startswith("file:"):
                continue
            name = Path(unquote(urlparse(url).path)).name
            if pkg["name"] != "torch" or not target.torch_index:
                raise BuildError(f"{target.name}: {name} was found only in a local folder; a lock "
                                 "records public sources", hint="make it available from an index")
            wheel["url"] = f"{target.torch_index.rstrip('/')}/{quote(name)}"
    tool = tomlkit.table(is_super_table=True)
    record = tomlkit.table()
    record.add("environment", target.name)
    record.add("platform", target.platform)
    record.add("python", target.python)
    record.add("requirements", list(target.requirements))
    record.add("indexes", list(target.indexes))
    record.add("torch-index", bool(target.indexes))
    record.add("inputs", target.inputs_hash)
    tool.add("kbuild", record)
    doc.add(tomlkit.nl())
    doc.add("tool", tool)
    return tomlkit.dumps(doc)
