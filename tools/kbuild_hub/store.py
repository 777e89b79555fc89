"""The store every route handler works on: repos and blobs under one lock, persistence to
`data_dir`, and the lookups the handlers share (repo by URL, revision, tree entries)."""

from __future__ import annotations

import hashlib
import json
import secrets
import threading
import time
from dataclasses import asdict
from pathlib import Path
from urllib.parse import unquote

from kbuild.core.files import write_atomic

from .model import (
    PLURAL_TO_TYPE,
    URL_PREFIX,
    Commit,
    Discussion,
    HubError,
    Repo,
    iso,
    not_found,
    tree_oids,
)
from .wire import Request


class Store:
    """State and shared lookups; `HubServer` adds the HTTP side, the route mixins the handlers."""

    token: str | None
    read_token: str | None
    user: str
    data_dir: Path | None
    _lock: threading.RLock
    _repos: dict[tuple[str, str], Repo]
    _blobs: dict[str, bytes]
    _trees: dict[str, dict[str, str]]  # commit -> directory tree ids
    _saved_blobs: set[str]

    # -- lookups ---------------------------------------------------------------------

    def _authorized(self, req: Request) -> bool:
        """Whether the request may read private repos (either token)."""
        given = req.bearer()
        return self.token is None or (given is not None and given in (self.token, self.read_token))

    def _repo(self, req: Request, plural_or_type: str | None, ns: str, name: str) -> Repo:
        repo_type = PLURAL_TO_TYPE.get(plural_or_type or "models", plural_or_type or "model")
        repo = self._repos.get((repo_type, f"{unquote(ns)}/{unquote(name)}"))
        if repo is None:
            raise not_found("RepoNotFound", f"{ns}/{name}")
        if repo.private and not self._authorized(req):
            raise HubError(401, "Repository not found", "RepoNotFound")
        return repo

    def _repo_url(self, req: Request, repo: Repo) -> str:
        return f"{req.base_url}/{URL_PREFIX[repo.type]}{repo.id}"

    @staticmethod
    def _split_rev(rest: str) -> tuple[str, str]:
        """Split `<rev>[/<path>]` (raw). The rev is one %2F-encoded segment, or an unencoded `refs/x/y`."""
        segments = rest.split("/")
        is_ref = len(segments) >= 3 and segments[0] == "refs" and segments[1] in ("heads", "tags", "pr", "convert")
        n = 3 if is_ref else 1
        rev = "/".join(unquote(s) for s in segments[:n])
        path = "/".join(unquote(s) for s in segments[n:])
        return rev, path.strip("/")

    def _resolve_rev(self, repo: Repo, rev: str) -> str:
        oid = repo.resolve(rev)
        if oid is None:
            raise not_found("RevisionNotFound", rev)
        return oid

    # -- persistence -----------------------------------------------------------------

    def _save(self) -> None:
        """Write the store to data_dir (blobs once, then an atomic state.json). Call under the lock."""
        if self.data_dir is None:
            return
        blob_dir = self.data_dir / "blobs"
        blob_dir.mkdir(parents=True, exist_ok=True)
        for oid in self._blobs.keys() - self._saved_blobs:
            target = blob_dir / oid
            if not target.exists():
                write_atomic(target, self._blobs[oid])
            self._saved_blobs.add(oid)
        state = {"repos": []}
        for repo in self._repos.values():
            entry = asdict(repo)
            entry["pr_refs"] = {str(k): v for k, v in repo.pr_refs.items()}
            entry["discussions"] = {str(k): v for k, v in entry["discussions"].items()}
            state["repos"].append(entry)
        write_atomic(self.data_dir / "state.json", json.dumps(state))

    def _load(self) -> None:
        state_file = self.data_dir / "state.json"  # type: ignore[operator]
        if not state_file.exists():
            return
        state = json.loads(state_file.read_text())
        for entry in state["repos"]:
            repo = Repo(
                type=entry["type"], id=entry["id"], private=entry["private"],
                created_at=entry["created_at"], gated=entry.get("gated", False),
            )
            repo.commits = {oid: Commit(**c) for oid, c in entry["commits"].items()}
            repo.branches, repo.tags = entry["branches"], entry["tags"]
            repo.pr_refs = {int(k): v for k, v in entry["pr_refs"].items()}
            repo.discussions = {int(k): Discussion(**d) for k, d in entry["discussions"].items()}
            self._repos[(repo.type, repo.id)] = repo
            for commit in repo.commits.values():
                for oid in commit.files.values():
                    if oid not in self._blobs:
                        self._blobs[oid] = (self.data_dir / "blobs" / oid).read_bytes()  # type: ignore[operator]
                        self._saved_blobs.add(oid)

    # -- store operations (call under the lock) ---------------------------------------

    def _new_commit(
        self, repo: Repo, parents: list[str], files: dict[str, str], title: str, message: str, author: str
    ) -> Commit:
        date = iso(time.time())
        seed = "\n".join([*parents, *sorted(f"{p} {o}" for p, o in files.items()), author, date, title, message])
        oid = hashlib.sha1(f"{seed}\n{secrets.token_hex(8)}".encode()).hexdigest()
        commit = Commit(oid, parents, title, message, author, date, files)
        repo.commits[oid] = commit
        return commit

    def _trees_of(self, commit: Commit) -> dict[str, str]:
        trees = self._trees.get(commit.oid)
        if trees is None:
            trees = self._trees[commit.oid] = tree_oids(commit.files)
        return trees

    def _entry(self, commit: Commit, path: str, is_dir: bool, repo: Repo | None = None) -> dict:
        """One tree / paths-info entry; with `repo`, also its last commit (expand)."""
        if is_dir:
            entry = {"type": "directory", "oid": self._trees_of(commit)[path], "size": 0, "path": path}
        else:
            oid = commit.files[path]
            entry = {"type": "file", "oid": oid, "size": len(self._blobs[oid]), "path": path}
        if repo is not None:
            last = self._last_change(repo, commit, path, is_dir)
            entry["lastCommit"] = {"id": last.oid, "title": last.title, "date": last.date}
        return entry

    def _last_change(self, repo: Repo, commit: Commit, path: str, is_dir: bool) -> Commit:
        def version(c: Commit) -> str | None:
            return self._trees_of(c).get(path) if is_dir else c.files.get(path)

        current = version(commit)
        last = commit
        for older in repo.history(commit.oid)[1:]:
            if version(older) != current:
                break
            last = older
        return last
