"""Source identity: the build uid and the git provenance recorded in metadata."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from .errors import BuildError
from .layout import BUILDER_WRITES
from .runner import capture


@dataclass(frozen=True)
class GitState:
    commit: str
    dirty: bool  # tracked files changed, or an input file that git does not track
    tree: str  # tree id of the project directory at HEAD


def _git(cwd: Path, *args: str) -> str | None:
    proc = capture(["git", "-C", str(cwd), *args])
    return proc.stdout.strip() if proc.returncode == 0 else None


def _untracked_inputs(path: Path, inputs: list[Path]) -> bool:
    """Whether an input file is not in git's index (untracked or ignored): its content is not
    in the tree id, so a build that reads it is not the commit's build."""
    root = path.resolve()
    names = []
    for f in inputs:
        try:
            names.append(f.relative_to(root).as_posix())
        except ValueError:  # resolves outside the project: never the commit's content
            return True
    listing = capture(["git", "--literal-pathspecs", "-c", "core.quotePath=true", "-C", str(path),
                       "ls-files", "--others", "--", *names])  # --others: ignored files too
    return listing.returncode != 0 or bool(listing.stdout.strip())


def git_state(path: Path, inputs: list[Path] | None = None) -> GitState | None:
    """The commit and tree of `path`; dirty when a tracked file under it changed or when one of
    the resolved `inputs` is not tracked (files git ignores that are no input, such as
    __pycache__/, do not count, nor does what builds write: `BUILDER_WRITES`, even tracked)."""
    top = _git(path, "rev-parse", "--show-toplevel")
    commit = _git(path, "rev-parse", "HEAD") if top else None
    if not top or not commit:
        return None
    rel = path.resolve().relative_to(Path(top).resolve()).as_posix()
    tree = _git(path, "rev-parse", f"HEAD:{rel}" if rel != "." else "HEAD^{tree}")
    if not tree:  # the directory is not committed yet
        return None
    builder = [f":(exclude,glob){pattern}" for pattern in BUILDER_WRITES]
    status = _git(path, "status", "--porcelain", "--untracked-files=no", "--", ".", *builder)
    dirty = bool(status) or (bool(inputs) and _untracked_inputs(path, inputs or []))
    return GitState(commit=commit, dirty=dirty, tree=tree)


def content_hash(files: list[Path], root: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(set(files)):
        try:
            rel = f.relative_to(root).as_posix()
            data = f.read_bytes()
        except ValueError:
            raise BuildError(f"input file {f} is outside the project (through a symlink?)",
                             file=root, hint="keep every input file inside the project folder"
                             ) from None
        except OSError as exc:
            raise BuildError(f"cannot read input file {f}: {exc.strerror or exc}", file=root) from None
        h.update(rel.encode() + b"\0")
        h.update(hashlib.sha256(data).digest())
    return h.hexdigest()


def build_uid(project: Path, inputs: list[Path]) -> tuple[str, GitState | None]:
    """7 hex digits of the project's git tree id (`_dirty` when tracked files changed or an
    input file is untracked), or of a hash of the inputs outside git."""
    state = git_state(project, inputs)
    if state is None:
        return content_hash(inputs, project.resolve())[:7], None
    return state.tree[:7] + ("_dirty" if state.dirty else ""), state
