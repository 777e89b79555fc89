"""Source identity: the build uid and the git provenance recorded in metadata."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from .runner import capture


@dataclass(frozen=True)
class GitState:
    commit: str
    dirty: bool
    tree: str  # tree id of the project directory at HEAD


def _git(cwd: Path, *args: str) -> str | None:
    proc = capture(["git", "-C", str(cwd), *args])
    return proc.stdout.strip() if proc.returncode == 0 else None


def git_state(path: Path) -> GitState | None:
    top = _git(path, "rev-parse", "--show-toplevel")
    commit = _git(path, "rev-parse", "HEAD") if top else None
    if not top or not commit:
        return None
    rel = path.resolve().relative_to(Path(top).resolve()).as_posix()
    tree = _git(path, "rev-parse", f"HEAD:{rel}" if rel != "." else "HEAD^{tree}")
    if not tree:  # the directory is not committed yet
        return None
    status = _git(path, "status", "--porcelain", "--untracked-files=no", "--", ".")
    return GitState(commit=commit, dirty=bool(status), tree=tree)


def content_hash(files: list[Path], root: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(set(files)):
        h.update(f.relative_to(root).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def build_uid(project: Path, inputs: list[Path]) -> tuple[str, GitState | None]:
    """7 hex digits of the project's git tree id (`_dirty` when tracked files changed),
    or of a hash of the inputs outside git."""
    state = git_state(project)
    if state is None:
        return content_hash(inputs, project.resolve())[:7], None
    return state.tree[:7] + ("_dirty" if state.dirty else ""), state
