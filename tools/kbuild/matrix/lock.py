"""Locks for the PyPI realisation: a PEP 751 `pylock.<name>.toml` per environment and toolkit.

`kbuild lock` has uv resolve what an environment installs (torch and the environment's other PyPI
requirements; for a toolkit, NVIDIA's wheels) for one platform and Python into a pylock.toml with
exact versions and sha256 hashes, under `locks/<platform>/` next to the pixi.toml. A `[tool.kbuild]`
table records the inputs (requirements, indexes, Python, platform) and their hash: when pixi.toml
changes them, the lock is stale. Realising from a lock (envs.py) installs exactly its files, in
hash-checking mode, with no resolution.

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
from urllib.parse import quote, unquote, urlparse

import tomlkit

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


@dataclass(frozen=True)
class Lock:
    path: Path
    name: str
    inputs_hash: str
    torch_index: bool                # resolved with the environment's PyTorch index
    indexes: tuple[str, ...]
    platform: str
    python: str
    sha256: str                      # of the file: what provenance records
    packages: tuple[dict, ...]

    def requirement_lines(self) -> list[str]:
        """The lock as hash-pinned requirements: installing them resolves nothing."""
        lines = []
        for pkg in self.packages:
            hashes = [w["hashes"]["sha256"] for w in pkg.get("wheels", [])]
            if "sdist" in pkg:
                hashes.append(pkg["sdist"]["hashes"]["sha256"])
            if not hashes:
                raise BuildError(f"{pkg['name']} has no sha256 hash", file=self.path,
                                 key="packages", hint=f"re-lock: kbuild lock {self.name}")
            marker = f" ; {pkg['marker']}" if pkg.get("marker") else ""
            lines.append(f"{pkg['name']}=={pkg['version']}{marker} "
                         + " ".join(f"--hash=sha256:{h}" for h in hashes))
        return lines


def read(path: Path) -> Lock:
    data = path.read_bytes()
    try:
        doc = tomllib.loads(data.decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise BuildError(f"invalid lock: {e}", file=path, hint="re-lock it with `kbuild lock`") from None
    meta = doc.get("tool", {}).get("kbuild", {})
    if doc.get("lock-version") != "1.0" or not meta.get("inputs"):
        raise BuildError("not a lock written by `kbuild lock`", file=path, key="tool.kbuild",
                         hint="re-lock it with `kbuild lock`")
    return Lock(path=path, name=meta.get("environment", ""), inputs_hash=meta["inputs"],
                torch_index=bool(meta.get("torch-index")), indexes=tuple(meta.get("indexes", [])),
                platform=meta.get("platform", ""), python=meta.get("python", ""),
                sha256="sha256:" + hashlib.sha256(data).hexdigest(),
                packages=tuple(doc.get("packages", [])))


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


def states(spec: EnvSpec, platform: str | None = None) -> list[LockState]:
    """The toolkit's lock state (if any) and the environment's, against pixi.toml as it is now."""
    platform = platform or host_platform()
    if spec.locks is None:
        return []
    found = []
    env_path = lock_path(spec.locks, platform, spec.name)
    torch_index = False
    if env_path.is_file():
        torch_index = read(env_path).torch_index
    for target in (toolkit_target(spec, platform), env_target(spec, platform, torch_index)):
        if target is None:
            continue
        path = lock_path(spec.locks, platform, target.name)
        if not path.is_file():
            found.append(LockState(target, path, "missing", env=spec.name))
            continue
        lock = read(path)
        found.append(LockState(target, path, "current" if lock.inputs_hash == target.inputs_hash
                               else "stale", lock, spec.name))
    return found


def check(matrix: Matrix, platform: str | None = None) -> tuple[list[str], list[str]]:
    """(problems, unlocked): stale locks and locks of no environment; what has no lock."""
    platform = platform or host_platform()
    problems, notes, wanted = [], [], set()
    for spec in matrix.envs:
        for st in states(spec, platform):
            wanted.add(st.path.name)
            if st.state == "stale":
                problems.append(f"{st.problem}: {st.fix}")
            elif st.state == "missing":
                notes.append(st.target.name)
    folder = matrix.locks / platform
    for path in sorted(folder.glob("pylock.*.toml")) if folder.is_dir() else []:
        if path.name not in wanted:
            problems.append(f"{path.name}: no environment of {matrix.path.name} uses it: delete it")
    return problems, list(dict.fromkeys(notes))


# --- writing ------------------------------------------------------------------------------------

def resolve(target: Target, folder: Path, inst, timeout: float = 900) -> Lock:
    """Resolves `target` with uv into its pylock file (written atomically) and returns it."""
    if inst.kind != "uv":
        raise BuildError("`kbuild lock` needs uv", hint="pip install uv")
    if target.platform not in PLATFORM_TAGS:
        raise BuildError(f"cannot lock for {target.platform}",
                         hint=f"platforms: {', '.join(PLATFORM_TAGS)}")
    path = lock_path(folder, target.platform, target.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "pylock.toml"
        cmd = [inst.uv, "pip", "compile", "-", "--quiet", "--format", "pylock.toml", "--no-header",
               "--python-version", target.python, "--python-platform", PLATFORM_TAGS[target.platform],
               "-o", str(out), *inst.lock_args(list(target.indexes))]
        proc = capture(cmd, input="\n".join(target.requirements) + "\n", env=inst._env(),
                       timeout=timeout)
        if proc.returncode != 0:
            from .installer import _last_error
            raise BuildError(f"{target.name}: {_last_error(proc.stderr)}",
                             hint="`kbuild envs --list` says what is missing here")
        text = _publish(out.read_text(), target)
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
