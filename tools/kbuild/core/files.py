"""Replacing a file: `write_atomic`, the one way kbuild writes a file others may read while it
is written (a signature bundle, a generated workflow, a lock file).

Its contract:

- **All or nothing.** Readers of `path` see the old content or the new, never a part: the new
  bytes go to a temporary file in the same folder, are flushed to disk (`fsync`), and the
  temporary file is renamed over `path` (`os.replace`). On any failure the temporary file is
  removed, `path` is as it was, and the error is raised.
- **No link is followed at the last step.** The temporary file is created with
  `O_CREAT | O_EXCL | O_NOFOLLOW` under a fresh random name, so whatever stands at that name
  (a link planted there, dangling or not) makes the creation fail and another name is tried;
  nothing is ever written through it. A link *at `path`* is replaced by the new file, not
  written through. The folders above `path` are the caller's: they are followed as given.
- **The folder must exist**; it is not created.
- **Mode**: `mode` when given (e.g. `0o755`), set on the temporary file before the rename;
  otherwise that of a new file (`0o666` less the umask), whatever `path` had before.
- **Durability**: the folder is flushed after the rename where the system allows it, so the
  rename survives a crash.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_ATTEMPTS = 100


def _temporary_name(target: Path) -> str:
    return f".{target.name}.{secrets.token_hex(8)}.tmp"


def write_atomic(path: Path | str, data: bytes | str, mode: int | None = None) -> None:
    """Replaces `path` by a file holding `data` (text is written as UTF-8), atomically and never
    through a link (the module's docstring holds the contract)."""
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    for _ in range(_ATTEMPTS):
        tmp = path.parent / _temporary_name(path)
        try:
            fd = os.open(tmp, _FLAGS, 0o666)
        except FileExistsError:  # taken, or a link stands there: another name
            continue
        break
    else:
        raise FileExistsError(f"no free temporary name next to {path} after {_ATTEMPTS} tries")
    try:
        try:
            if mode is not None:
                os.fchmod(fd, mode)
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _flush_folder(path.parent)


def _flush_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems cannot flush a folder: the rename stands
        pass
    finally:
        os.close(fd)
