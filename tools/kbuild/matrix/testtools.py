"""What a project's tests need and an interpreter lacks, installed beside its environment (never
into it): `kbuild dev` and `kbuild test` put the folder on the tests' PYTHONPATH. What they need
is stages/devtest/testdeps.py's; how it is installed, installer.py `install_beside`."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from importlib import metadata
from pathlib import Path
from typing import Callable

from ..core.envstamp import STAMP
from ..core.errors import BuildError
from ..core.locking import locked
from ..core.runner import capture, marked_answer
from .installer import Installer

Log = Callable[[str], None]


INSTALLED_MARKER = "KBUILD-INSTALLED "  # as resources/scripts/installed.py answers


def environment_holds(python: str) -> dict:
    """What the environment of `python` holds: {"python", "markers", "dists"} (dists by
    canonical name), from resources/scripts/installed.py."""
    from importlib import resources

    from packaging.utils import canonicalize_name
    script = resources.files("kbuild") / "resources" / "scripts" / "installed.py"
    proc = capture([python, str(script)], timeout=120)
    answer = marked_answer(proc.stdout, INSTALLED_MARKER)
    if answer is None or not isinstance(answer.get("dists"), dict):
        last = (proc.stderr.strip().splitlines() or ["no answer"])[-1]
        raise BuildError(f"{python} could not say what its environment holds (exit "
                         f"{proc.returncode}): {last}", hint="check that this interpreter runs")
    answer["dists"] = {canonicalize_name(n): v for n, v in answer["dists"].items()}
    return answer


def unmet(requirements: list[str], holds: dict) -> list[str]:
    """The requirements (PEP 508) the environment described by `holds` does not meet: absent,
    or held at a version outside the requirement's (a marker that does not apply here: met)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import InvalidVersion
    out = []
    for text in requirements:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate(holds["markers"]):
            continue
        held = holds["dists"].get(canonicalize_name(req.name))
        try:
            met = held is not None and (not req.specifier or
                                        req.specifier.contains(held, prereleases=True))
        except InvalidVersion:
            met = False
        if not met:
            out.append(text)
    return out


def test_tools(python: str, folder: Path, requirements: list[str], log: Log = lambda _: None
               ) -> list[Path]:
    """The tests' requirements that the environment of `python` lacks (pytest and numpy for a
    matrix environment, whose lock pins torch and kernels only), installed in a folder of their
    own (`_tools/test-…`, reused while the same ones are missing), to put on the test run's
    PYTHONPATH (its site-packages folders are returned): the environment stays as it is, a
    locked one as locked. [] when it lacks nothing (then no index is asked)."""
    holds = environment_holds(python)
    missing = unmet(requirements, holds)
    if not missing:
        return []
    try:  # kbuild's own pytest, when that is what is missing: the version its tests run with
        pins = {"pytest": f"pytest=={metadata.version('pytest')}"}
    except metadata.PackageNotFoundError:
        pins = {}
    wanted = [pins.get(r, r) for r in missing]
    key = hashlib.sha256(json.dumps([holds["python"], sorted(wanted), sorted(holds["dists"].items())]
                                    ).encode()).hexdigest()[:16]
    target = folder / "_tools" / f"test-py{holds['python']}-{key}"
    with locked(target.with_name(target.name + ".lock")):
        if not (target / STAMP).is_file():
            shutil.rmtree(target, ignore_errors=True)
            log(f"installing {', '.join(wanted)} for the tests, beside the environment (not in it)")
            staging = target.with_name(target.name + ".partial")
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
            installed = Installer.install_beside(python, staging, wanted, holds["dists"],
                                                 folder / "logs" / "tools.log")
            (staging / STAMP).write_text(json.dumps({"key": key, "requirements": wanted,
                                                     "installed": installed}) + "\n")
            os.replace(staging, target)  # a whole folder, not core/files.write_atomic's one file
    return sorted(target.glob("lib*/python*/site-packages"))
