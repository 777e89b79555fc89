"""The builder's own caches under $KBUILD_CACHE_DIR (default $XDG_CACHE_HOME/kbuild or
~/.cache/kbuild): whether a cache folder can be trusted (yours or root's, writable by no one
else, nor any folder above it), the memo files that remember a check's success, and pruning of
cache entries. The CUTLASS headers kept there are provisioned by the `cutlass` package.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path

from .errors import BuildError
from .files import write_atomic

CACHE_VAR = "KBUILD_CACHE_DIR"


def cache_root() -> Path:
    if os.environ.get(CACHE_VAR):
        return Path(os.environ[CACHE_VAR]).resolve()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return (Path(base) / "kbuild").resolve()


# --- the verified cache ------------------------------------------------------------------------

def trusted_uids() -> set[int]:
    """Owners whose files the cache may hold: you, and root."""
    return {os.geteuid(), 0}


def unsafe_reason(st: os.stat_result, *, sticky_ok: bool = False) -> str | None:
    """Why a file or folder with this lstat result cannot be trusted, or None."""
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if st.st_uid not in trusted_uids():
        return f"it is owned by uid {st.st_uid}, not by you"
    writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if writable and not (sticky_ok and st.st_mode & stat.S_ISVTX and stat.S_ISDIR(st.st_mode)):
        return f"other users can write it (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def make_private_dir(path: Path) -> None:
    if not path.exists():
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o755)  # whatever the umask: only the owner writes the cache


def memo_file(folder: str, key: str) -> Path | None:
    """$KBUILD_CACHE_DIR/`folder`/`key`: where a check's success is remembered (the file's
    presence, or its JSON), if that cache is safe to trust: the folder and those above it owned
    by you (or root) and writable by no one else. None where it is not."""
    base = optional_base(folder, "the load-check memo")
    return base / key if base is not None else None


_WARNED: set[str] = set()


def stderr_warning(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def stderr_note(message: str) -> None:
    """What the build waits for (a download), on stderr."""
    print(message, file=sys.stderr, flush=True)


def without_cache(reason: str) -> str:
    """Says once per process (on stderr) that the build goes on without an optional cache (a
    configure seed, a precompiled header, a memo), and why; returns the reason."""
    if reason not in _WARNED:
        _WARNED.add(reason)
        stderr_warning(f"{reason}; going on without it")
    return reason


def optional_base(name: str, what: str) -> Path | None:
    """$KBUILD_CACHE_DIR/`name` for a cache the build can do without, or None (with a warning
    naming the folder) where it cannot be used: read-only, not writable, unsafe."""
    try:
        return trusted_base(cache_root(), name, what)
    except BuildError as e:
        without_cache(e.message)
        return None


def unwritable(what: str, path: Path, error: OSError) -> str:
    """The reason a cache entry could not be written (a full disk, a read-only folder)."""
    return without_cache(f"{what}: cannot write {path}: {error.strerror or error}")


def read_memo(path: Path | None) -> str | None:
    """The text of a memo file, when it is a plain file only you (or root) can write."""
    if path is None:
        return None
    try:
        if _unsafe_file(path):
            return None
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


def _unsafe_file(path: Path) -> bool:
    st = path.lstat()
    return not stat.S_ISREG(st.st_mode) or unsafe_reason(st) is not None


def write_memo(path: Path | None, text: str = "") -> None:
    """Writes a memo file (owner-only, atomically); a cache that cannot be written is no error."""
    if path is None:
        return
    try:
        write_atomic(path, text, mode=0o644)
    except OSError as e:
        unwritable("the load-check memo", path.parent, e)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        pass
    return True


def remove_abandoned(root: Path) -> None:
    """Removes entry folders still being written (`<key>.tmp<pid>`) by a process that is gone
    (a build killed before it could clean up)."""
    for tmp in root.glob("*.tmp*"):
        pid = tmp.name.rsplit(".tmp", 1)[1]
        if tmp.is_dir() and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True)


def prune_entries(root: Path, keep: int) -> None:
    """Removes all but the `keep` most recently used entry folders of a cache store, and folders
    abandoned half-written; folders still being written, `*.tmp<pid>`, are left alone."""
    remove_abandoned(root)
    entries = sorted((p for p in root.iterdir() if p.is_dir() and ".tmp" not in p.name),
                     key=lambda p: p.stat().st_mtime, reverse=True)
    for old in entries[keep:]:
        shutil.rmtree(old, ignore_errors=True)


def trusted_base(root: Path, name: str = "cutlass", what: str = "the CUTLASS header cache") -> Path:
    """`root`/`name`, created if missing, after checking that only you (or root) can change it
    or any folder above it; a BuildError naming the folder otherwise (also where it cannot be
    created: read-only, a file in the way, a full disk)."""
    base = root / name
    try:
        make_private_dir(root)
        make_private_dir(base)
        stats = [(path, path.lstat()) for path in [base, root, *root.parents]]
    except OSError as e:
        raise BuildError(f"{what} cannot be used: {e.filename or base}: {e.strerror or e}",
                         hint=f"make {root} a folder you can write, or set {CACHE_VAR} to one"
                         ) from None
    for path, st in stats:
        problem = unsafe_reason(st, sticky_ok=path not in (base, root))
        if problem:
            raise BuildError(f"{what} cannot be trusted: {path}: {problem}",
                             hint=f"make it yours and not writable by others (chmod go-w), or set "
                                  f"{CACHE_VAR} to a folder only you can write")
    return base
