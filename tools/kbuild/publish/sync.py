"""Bringing one branch of a Hub repo to a set of local files in one commit (or pull request).

Local files are compared with the remote tree by git blob id: nothing changed, no commit.
The commit names the branch head it was computed against (`parent_commit`), so a concurrent
push makes it fail with 412 instead of being overwritten. A failed commit changes nothing, so
the client retries transient failures; each attempt re-reads the head and recomputes the diff.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import BuildError
from .hub import REPO_TYPE, HubClient


@dataclass
class Diff:
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.added or self.changed or self.deleted)


def git_blob_oid(path: Path) -> str:
    """The git blob id of a file (what the Hub reports as its oid), streamed."""
    h = hashlib.sha1(b"blob %d\0" % path.stat().st_size)
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _bytes_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()



def compute_diff(local: dict[str, str], remote: dict[str, str], delete_under: list[str]) -> Diff:
    d = Diff()
    for path, oid in sorted(local.items()):
        if path not in remote:
            d.added.append(path)
        elif remote[path] != oid:
            d.changed.append(path)
        else:
            d.unchanged.append(path)
    d.deleted = sorted(p for p in remote if p not in local
                       and any(p.startswith(prefix) for prefix in delete_under))
    return d


@dataclass
class SyncResult:
    diff: Diff
    commit: str | None  # new commit (or the landed one), None when nothing was committed
    head: str | None  # the branch head the diff was computed against
    commit_url: str | None = None
    pr_url: str | None = None


def local_oids(local: dict[str, Path | bytes]) -> dict[str, str]:
    """The git blob id of each file to upload (reads every one: an unreadable file fails here)."""
    return {p: git_blob_oid(src) if isinstance(src, Path) else _bytes_oid(src)
            for p, src in local.items()}


def sync_branch(hub: HubClient, *, branch: str, local: dict[str, Path | bytes], dirs: list[str],
                 files: list[str], delete_under: list[str], message: str, description: str,
                 create_pr: bool, dry_run: bool, base: str | None = None,
                 oids: dict[str, str] | None = None) -> SyncResult:
    """Bring `branch` to `local` in one commit (or a PR): remote state is read from the
    folders `dirs` (recursively) and the single `files`; stale files are deleted only under
    the `delete_under` prefixes. A dry run of a branch not made yet compares with `base`, the
    branch it will be made from. `oids`: local_oids(local), when already known."""
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete

    oids = oids if oids is not None else local_oids(local)
    what = f"upload to {hub.repo_id}@{branch}"
    state: dict[str, Any] = {"first_head": None, "first_diff": None}

    def remote_files(head: str) -> dict[str, str]:
        remote = hub.tree(head, dirs)
        if files:
            remote.update(hub.file_oids(head, files))
        return remote

    def attempt() -> SyncResult:
        branches = hub.branches()
        head = branches.get(branch)
        if head is None:
            if not dry_run:
                raise BuildError(f"{what}: branch {branch} disappeared during the upload",
                                 hint="run it again")
            start = branches.get(base) if base else None
            return SyncResult(compute_diff(oids, remote_files(start) if start else {},
                                           delete_under), None, None)
        remote = remote_files(head)
        diff = compute_diff(oids, remote, delete_under)
        first = state["first_head"]
        if first is None:
            state.update(first_head=head, first_diff=diff)
        if diff.empty or dry_run:
            # An earlier attempt whose answer was lost may have landed: then the head moved
            # and nothing is left to do; report that commit and what it changed.
            if diff.empty and first is not None and head != first and not create_pr:
                return SyncResult(state["first_diff"], head, head)
            return SyncResult(diff, None, head)
        ops: list[Any] = []
        for p in diff.added + diff.changed:
            src = local[p]
            ops.append(CommitOperationAdd(path_in_repo=p,
                                          path_or_fileobj=str(src) if isinstance(src, Path) else src))
        ops += [CommitOperationDelete(path_in_repo=p) for p in diff.deleted]
        info = hub.api.create_commit(hub.repo_id, ops, commit_message=message,
                                     commit_description=description, repo_type=REPO_TYPE,
                                     revision=branch, create_pr=create_pr, parent_commit=head)
        return SyncResult(diff, info.oid, head, info.commit_url, info.pr_url)

    return hub.call(what, attempt)
