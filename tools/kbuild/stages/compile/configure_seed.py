"""Before CMake: a new build folder starts from what CMake found out about the same
tools the last time (its cache and its per-version platform files), so the configure skips
compiler identification, where nvcc compiles a test program: ~1.5 s of a 1.6 s CUDA configure.

- Kept in $KBUILD_CACHE_DIR/cmake/<key>/ after a configure that identified the compilers; the
  key hashes the configure line (its source and build folders left out), the real path, size and
  mtime of cmake, the C++ compiler, nvcc (and its nvcc.profile) and the compiler launcher, and
  the environment variables CMake reads for compilers (CC, CXX, CUDACXX, CUDAHOSTCXX, *FLAGS,
  CMAKE_*, CUDA_HOME, CUDA_PATH, PATH). The files hold the two folders as placeholders.
- Used only from folders only you (or root) can change, as the precompiled headers. A seeded
  folder is what CMake itself leaves for a second configure of the same tree (same compile lines
  and rules; tests/unit/test_configure_seed.py). A configure that fails from a seed runs again
  from an empty folder.
- A seed whose configure fails is replaced by the one from the empty folder; a cache that
  cannot be written (read-only, full) is warned about once and left alone, with nothing
  half-written in it.
- KBUILD_CONFIGURE_SEED=off turns it off.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path

from ...core.switches import switch
from ...core import deps

SEED_VAR = "KBUILD_CONFIGURE_SEED"
CACHE = "CMakeCache.txt"
SOURCE, BUILD = "@KBUILD_SOURCE_DIR@", "@KBUILD_BUILD_DIR@"
KEEP = 20  # seeds kept (least recently used go first); each is ~30 KB
_ENV = re.compile(r"^(CC|CXX|CUDACXX|CUDAHOSTCXX|\w*FLAGS|CMAKE_\w+|CUDA_HOME|CUDA_PATH|PATH)$")
_VERSION_DIR = re.compile(r"^\d+\.\d+[\w.-]*$")


def enabled() -> bool:
    return switch(SEED_VAR)


def _identity(path: str | None) -> list | None:
    if not path:
        return None
    real = os.path.realpath(shutil.which(path) or path)
    try:
        st = os.stat(real)
    except OSError:
        return [real, None]
    return [real, st.st_size, st.st_mtime_ns]


def _tools(args: list[str]) -> list[str]:
    """cmake and every program the configure line names (compilers, launchers, make program)."""
    tools = [args[0]]
    for a in args:
        m = re.match(r"^-DCMAKE_\w*(COMPILER|COMPILER_LAUNCHER|MAKE_PROGRAM)=(.+)$", a)
        if m:
            tools.append(m.group(2))
            if m.group(1) == "COMPILER" and Path(m.group(2)).name == "nvcc":
                tools.append(str(Path(m.group(2)).parent / "nvcc.profile"))
    return tools


def key_of(args: list[str], src: Path, build: Path) -> str:
    line = [_placeholders(a, src, build) for a in args]
    env = sorted((k, v) for k, v in os.environ.items() if _ENV.match(k))
    ident = [line, [_identity(t) for t in _tools(args)], env]
    return hashlib.sha256(json.dumps(ident).encode()).hexdigest()[:24]


def _placeholders(text: str, src: Path, build: Path) -> str:
    return text.replace(str(build), BUILD).replace(str(src), SOURCE)


def _paths(text: str, src: Path, build: Path) -> str:
    return text.replace(BUILD, str(build)).replace(SOURCE, str(src))


WHAT = "the CMake configure cache"


def _store() -> Path | None:
    return deps.optional_base("cmake", WHAT)


def _version_dir(build: Path) -> Path | None:
    found = [p.parent for p in (build / "CMakeFiles").glob("*/CMakeSystem.cmake")
             if _VERSION_DIR.match(p.parent.name)]
    return found[0] if len(found) == 1 else None


def _entry_files(entry: Path) -> list[Path] | None:
    """The files of a trusted, complete seed (None: there is none to use)."""
    try:
        if deps.unsafe_reason(entry.lstat()):
            return None
        files = [p for p in entry.rglob("*") if not p.is_dir()]
        if any(deps.unsafe_reason(p.lstat()) for p in [*files, *(p.parent for p in files)]):
            return None
    except OSError:
        return None
    names = {p.relative_to(entry).as_posix() for p in files}
    if CACHE not in names or not any(n.endswith("/CMakeSystem.cmake") for n in names):
        return None
    return files


def restore(key: str, src: Path, build: Path) -> bool:
    """Fills the empty `build` from the seed of `key`; whether there was one."""
    root = _store() if enabled() else None
    if root is None:
        return False
    entry = root / key
    files = _entry_files(entry) if entry.is_dir() else None
    if not files:
        return False
    for path in files:
        target = build / path.relative_to(entry)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(_paths(path.read_text(encoding="utf-8"), src, build), encoding="utf-8")
    os.utime(entry)
    return True


def save(key: str, src: Path, build: Path) -> None:
    """Keeps what a configure that identified the compilers found, for the next new folder."""
    version = _version_dir(build)
    if not enabled() or version is None:
        return
    files = [build / CACHE, *sorted(version.glob("*.cmake"))]
    texts = {}
    for path in files:
        try:
            text = _placeholders(path.read_text(encoding="utf-8"), src, build)
        except (OSError, UnicodeDecodeError):
            return
        texts[path.relative_to(build).as_posix()] = text
    root = _store()
    if root is None:
        return
    entry, tmp = root / key, root / f"{key}.tmp{os.getpid()}"
    if entry.exists():
        return
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        for name, text in texts.items():
            path = tmp / name
            for folder in reversed([*path.relative_to(root).parents][:-1]):
                deps.make_private_dir(root / folder)
            path.write_text(text, encoding="utf-8")
            path.chmod(0o644)
    except OSError as e:  # a full disk: no half-written seed is left
        shutil.rmtree(tmp, ignore_errors=True)
        deps.unwritable(WHAT, root, e)
        return
    try:  # a whole folder renamed into place, not core/files.write_atomic's one file
        os.rename(tmp, entry)
    except OSError:  # saved by another build meanwhile
        shutil.rmtree(tmp, ignore_errors=True)
    deps.prune_entries(root, KEEP)


def forget(key: str) -> None:
    """Removes the seed of `key` (its configure failed), so that the next save replaces it."""
    root = _store()
    entry = root / key if root is not None else None
    if entry is None or not entry.is_dir():
        return
    aside = root / f"{key}.tmp{os.getpid()}"
    try:
        shutil.rmtree(aside, ignore_errors=True)
        os.rename(entry, aside)
    except OSError:
        return
    shutil.rmtree(aside, ignore_errors=True)

