"""Slowest first: the order in which Ninja starts a variant's compiles, from how long each took in
the previous build of the same variant (its .ninja_log).

Ninja starts the ready steps in the order of build.ninja (among steps as far from the end of
the build; every compile step of a kernel library is), and CMake writes a target's objects in
the order of its sources and the targets in the order they are made. So the generated CMake
lists name each kernel's sources slowest first, and the kernels by their slowest source: a heavy
unit that used to start last, and kept the build waiting for it alone, starts first. Only the
order changes: the compile lines stay the same, and the link takes the objects in a fixed order
(sorted by path, CMakeLists.txt), so the binary is the same byte for byte.

`KBUILD_SCHEDULE=off` keeps the manifest's order.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Iterable, Sequence, TypeVar

SCHEDULE_VAR = "KBUILD_SCHEDULE"
NINJA_LOG = ".ninja_log"
# Times within the same 25 % step count as equal (the manifest's order decides between them),
# so that a rebuild's small changes in timing do not reorder the lists and make CMake
# reconfigure; steps under a second never move.
STEP = 1.25
QUICK_S = 1.0
_OBJECT = re.compile(r"^CMakeFiles/[^/]+\.dir/(.+)\.o$")
T = TypeVar("T")


def enabled() -> bool:
    return os.environ.get(SCHEDULE_VAR, "").strip().lower() not in ("off", "0", "no", "false")


def ninja_steps(build: Path, since: int = 0) -> list[tuple[str, float]]:
    """The steps Ninja logged after byte `since` of .ninja_log, as (output, seconds), longest
    first (an output's latest entry counts)."""
    log = build / NINJA_LOG
    if not log.is_file():
        return []
    with log.open("rb") as f:
        f.seek(since)
        lines = f.read().decode("utf-8", "replace").splitlines()
    steps = {}
    for line in lines:
        parts = line.split("\t")
        if len(parts) >= 4 and parts[0].isdigit() and parts[1].isdigit():
            steps[parts[3]] = (int(parts[1]) - int(parts[0])) / 1000
    return sorted(steps.items(), key=lambda kv: -kv[1])


def previous_seconds(build: Path) -> dict[Path, float]:
    """How long each source's compile took when it was last compiled in `build` (CMake names an
    object after its source's absolute path); empty when scheduling is off or nothing was built."""
    if not enabled():
        return {}
    seconds = {}
    for output, took in ninja_steps(build):
        m = _OBJECT.match(output)
        if m:
            seconds[Path("/" + m.group(1))] = took
    return seconds


def _rank(seconds: float) -> int:
    return 0 if seconds < QUICK_S else 1 + int(math.log(seconds / QUICK_S, STEP))


def slowest_first(files: Sequence[Path], seconds: dict[Path, float]) -> list[Path]:
    """`files`, those that took longest last time first; equal ones keep their order."""
    order = {f: i for i, f in enumerate(files)}
    return sorted(files, key=lambda f: (-_rank(seconds.get(f, 0.0)), order[f]))


def slowest_groups_first(groups: Iterable[T], files_of, seconds: dict[Path, float]) -> list[T]:
    """Groups of files (the kernels' libraries) by the slowest file of each, slowest first;
    equal ones keep their order."""
    items = list(groups)
    rank = {id(g): max((_rank(seconds.get(f, 0.0)) for f in files_of(g)), default=0) for g in items}
    return sorted(items, key=lambda g: -rank[id(g)])
