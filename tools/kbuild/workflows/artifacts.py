"""A variant folder's tree digest, recorded by its build job (a job output) and checked by the
upload job against every `variant-*` artifact it downloaded, before anything is signed: a
runner that could replace an artifact between the two jobs (a persistent self-hosted runner
holds the run's artifact token) cannot replace the build job's output."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..core.errors import BuildError

PREFIX = "variant-"  # artifact name: variant-<variant>


def tree_digest(folder: Path) -> str:
    """sha256 over `<sha256 of the file>  <path>` of every file, sorted by path. A link or
    anything but a plain file is refused (an artifact stores neither)."""
    if not folder.is_dir() or folder.is_symlink():
        raise BuildError(f"{folder} is not a folder")
    lines = []
    for path in sorted(folder.rglob("*"), key=lambda p: p.relative_to(folder).as_posix()):
        rel = path.relative_to(folder).as_posix()
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            raise BuildError(f"{folder}: {rel} is not a plain file or folder",
                             hint="a variant holds plain files only")
        if path.is_file():
            lines.append(f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {rel}\n")
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def record(folder: Path) -> str:
    """`<variant>:<digest>`, the value a build job records."""
    return f"{folder.name}:{tree_digest(folder)}"


def recorded(outputs_json: str) -> dict[str, str]:
    """The build jobs' outputs (`toJSON(needs.build.outputs)`: d<slot> → `<variant>:<digest>`,
    empty for slots no job used) as variant → digest."""
    try:
        outputs = json.loads(outputs_json or "{}")
    except json.JSONDecodeError as e:
        raise BuildError(f"--recorded is not JSON: {e}", key="--recorded") from None
    if not isinstance(outputs, dict):
        raise BuildError("--recorded: expected the object of the build job's outputs",
                         key="--recorded")
    found: dict[str, str] = {}
    for key, value in outputs.items():
        if not value:
            continue
        variant, sep, digest = str(value).rpartition(":")
        if not sep or not variant or len(digest) != 64:
            raise BuildError(f"--recorded: output {key} = {value!r} is not <variant>:<sha256>",
                             key="--recorded")
        if found.get(variant, digest) != digest:
            raise BuildError(f"--recorded: {variant} is recorded twice, with two digests",
                             key="--recorded")
        found[variant] = digest
    return found


def verify(artifacts: Path, expected: dict[str, str]) -> list[str]:
    """Every `variant-*` folder of `artifacts` against `expected`; the variants, sorted. Refuses
    (naming each) an artifact no build job recorded, one missing, and one that differs."""
    present = {p.name[len(PREFIX):]: p for p in sorted(artifacts.glob(f"{PREFIX}*"))}
    problems = [f"{v}: recorded by its build job, not downloaded" for v in sorted(expected)
                if v not in present]
    for variant, folder in present.items():
        if variant not in expected:
            problems.append(f"{variant}: downloaded, but no build job recorded it")
        elif tree_digest(folder) != expected[variant]:
            problems.append(f"{variant}: differs from what its build job recorded")
    if problems:
        raise BuildError(f"{artifacts}: " + "; ".join(problems) + "; nothing was signed or uploaded",
                         hint="an artifact was replaced or lost between the jobs: rerun the "
                              "workflow, and check the runners (docs/security.md)")
    if not expected:
        raise BuildError(f"{artifacts}: no variant was recorded or downloaded")
    return sorted(present)
