"""Writing a file whole or not at all, never through a link someone placed in the way."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: str | bytes) -> None:
    """`data` into `path`: first into a new temporary file beside it (an unpredictable name,
    created exclusively: a link at any name is never followed), then renamed over `path` (a
    link at `path` is replaced, not followed). The file keeps the mode of the one it replaces
    (new files: 0644). On any failure `path` is unchanged and no temporary file is left."""
    try:
        st = path.lstat()
        mode = stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) else 0o644
    except FileNotFoundError:
        mode = 0o644
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
