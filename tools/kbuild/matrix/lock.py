"""Locks for the PyPI realisation: a PEP 751 `pylock.<name>.toml` per environment and toolkit.

`kbuild lock` has uv resolve what an environment installs (torch and the environment's other PyPI
requirements; for a toolkit, NVIDIA's wheels) for one platform and Python into a pylock.toml with
exact versions and sha256 hashes, under `locks/<platform>/` next to the pixi.toml. Its
`[tool.kbuild]` table records the inputs (a `Target`): when pixi.toml changes them, the lock is
stale. Realising from a lock (envs.py) installs exactly its files, in hash-checking mode, with no
resolution; the indexes installed from are the matrix's, never the lock's. The file itself is
read and validated by lockfile.py. `kbuild lock --check` re-derives each lock's package set
(`verify`).

Locks name public sources only: they are resolved against remote indexes (PyPI, the environment's
PyTorch index), and a wheel found only in a local folder (pip's find-links) is recorded at the
PyTorch index the environment names, where such labelled wheels are published.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote, urlparse

import tomlkit
from packaging.markers import Marker

from ..core.errors import BuildError
from ..core.files import write_atomic
from .lockfile import Lock, Package, host_platform, parse, read
from .matrix import EnvSpec, Matrix


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
    """`target` resolved by the installer's uv into pylock text, made public, with its
    `[tool.kbuild]` record."""
    text = inst.compile_lock(list(target.requirements), target.python, target.platform,
                             list(target.indexes), what=target.name, timeout=timeout,
                             constraints=list(constraints), find_links=list(find_links))
    return _publish(text, target)


def resolve(target: Target, folder: Path, inst, timeout: float = 900) -> Lock:
    """Resolves `target` with uv into its pylock file (written atomically) and returns it."""
    text = _compile(target, inst, timeout)
    path = lock_path(folder, target.platform, target.name)
    parse(text, path)  # what uv wrote is held to the same rules as any lock read
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text)
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
