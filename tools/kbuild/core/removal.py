"""Removing what kbuild made (`kbuild clean`) without leaving it: a symbolic link is removed, never
followed, and a mount point inside (another file system, or a bind mount of a folder from
elsewhere, which has the same device) is left as it is, with what holds it, and named."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Callable

from .errors import BuildError

MOUNTINFO = Path("/proc/self/mountinfo")


def mount_points() -> set[str]:
    """The mount points of this process (Linux; empty elsewhere), as absolute paths."""
    try:
        lines = MOUNTINFO.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return set()
    points = set()
    for line in lines:
        fields = line.split(" ")
        if len(fields) > 4:  # with octal escapes: \040 is a space
            points.add(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), fields[4]))
    return points


def remove_tree(path: Path, warn: Callable[[str], None]) -> bool:
    """Removes `path` and everything under it on its file system; whether all of it went. What
    lies on another one is left and named through `warn`; another error is a BuildError that
    names the file."""
    try:
        return _remove(path, os.lstat(path).st_dev, mount_points(), warn)
    except OSError as e:
        raise BuildError(f"cannot remove {e.filename or path}: {e.strerror or e}",
                         hint="remove it by hand, then run `kbuild clean` again") from None


def _remove(path: Path, device: int, mounts: set[str], warn: Callable[[str], None]) -> bool:
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(path)
        return True
    if st.st_dev != device or str(path) in mounts:
        warn(f"{path} is a mount point (another file system, or a folder mounted from elsewhere): "
             "not removed, nor what holds it; unmount it and run `kbuild clean` again")
        return False
    with os.scandir(path) as entries:
        inside = [Path(e.path) for e in entries]
    whole = all([_remove(p, device, mounts, warn) for p in inside])
    if whole:
        os.rmdir(path)
    return whole
