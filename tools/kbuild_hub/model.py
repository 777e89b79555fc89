"""The Hub's data model: repositories with git-like commits (full snapshots), branches, tags,
pull requests and discussions, and the rules for names, paths and refs."""

from __future__ import annotations

import hashlib
import re
import time
import unicodedata
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Callable

# URL plural -> repo type, and the URL prefix of each type's web/resolve routes.
PLURAL_TO_TYPE = {"models": "model", "datasets": "dataset", "spaces": "space", "kernels": "kernel"}
TYPE_TO_PLURAL = {v: k for k, v in PLURAL_TO_TYPE.items()}
URL_PREFIX = {"model": "", "dataset": "datasets/", "space": "spaces/", "kernel": "kernels/"}
DEFAULT_BRANCH = "main"
TREE_PAGE_SIZE = 1000
TREE_EXPAND_PAGE_SIZE = 50
COMMITS_PAGE_SIZE = 50
DISCUSSIONS_PAGE_SIZE = 50

# What the Hub puts in the initial commit of every new repo.
GITATTRIBUTES = b"""*.bin filter=lfs diff=lfs merge=lfs -text
*.ckpt filter=lfs diff=lfs merge=lfs -text
*.h5 filter=lfs diff=lfs merge=lfs -text
*.onnx filter=lfs diff=lfs merge=lfs -text
*.pt filter=lfs diff=lfs merge=lfs -text
*.pth filter=lfs diff=lfs merge=lfs -text
*.safetensors filter=lfs diff=lfs merge=lfs -text
*.tar.* filter=lfs diff=lfs merge=lfs -text
*.zip filter=lfs diff=lfs merge=lfs -text
"""

MAX_PATH_PART = 255   # bytes: a file name on the clients' file systems
MAX_PATH = 1024       # bytes: the path in the repo (the client's cache adds its own folders)
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
HEX_RE = re.compile(r"[0-9a-f]{5,40}")
BAD_REF_RE = re.compile(r"(^[-/.])|(\.\.)|([\s~^:?*\[\\])|(/$)|(\.lock$)|(//)|(@\{)")


def git_blob_oid(data: bytes) -> str:
    """The git blob id of `data` (what the Hub sends as a file's oid / ETag)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%03dZ" % (int(t * 1000) % 1000)


class HubError(Exception):
    """An error answer: status, message, optional X-Error-Code and extra JSON fields."""

    def __init__(self, status: int, message: str, code: str | None = None, **extra: Any):
        super().__init__(message)
        self.status, self.message, self.code, self.extra = status, message, code, extra


def not_found(kind: str, what: str, **extra: Any) -> HubError:
    messages = {
        "RepoNotFound": "Repository not found",
        "RevisionNotFound": f"Invalid rev id: {what}",
        "EntryNotFound": f"Entry not found: {what}",
    }
    return HubError(404, messages[kind], kind, **extra)


# ----------------------------------------------------------------------------- model


@dataclass
class Commit:
    oid: str
    parents: list[str]
    title: str
    message: str
    author: str
    date: str
    files: dict[str, str]  # path -> blob oid (full snapshot)


@dataclass
class Discussion:
    num: int
    title: str
    author: str
    created_at: str
    is_pull_request: bool
    status: str  # open | closed | merged | draft
    base: str | None = None  # target branch of a pull request
    start: str | None = None  # commit the PR started from
    merge_commit: str | None = None
    events: list[dict] = field(default_factory=list)


@dataclass
class Repo:
    type: str
    id: str
    private: bool
    created_at: str
    gated: Any = False
    commits: dict[str, Commit] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    pr_refs: dict[int, str] = field(default_factory=dict)  # refs/pr/N -> commit
    discussions: dict[int, Discussion] = field(default_factory=dict)

    @property
    def namespace(self) -> str:
        return self.id.split("/", 1)[0]

    def resolve(self, rev: str) -> str | None:
        """Commit id for a branch, tag, `refs/...` name, full or abbreviated commit id."""
        if rev in self.branches:
            return self.branches[rev]
        if rev in self.tags:
            return self.tags[rev]
        for prefix, table in (("refs/heads/", self.branches), ("refs/tags/", self.tags)):
            if rev.startswith(prefix):
                return table.get(rev[len(prefix):])
        if m := re.fullmatch(r"refs/pr/(\d+)", rev):
            return self.pr_refs.get(int(m[1]))
        if HEX_RE.fullmatch(rev):
            if rev in self.commits:
                return rev
            if len(rev) >= 7:
                hits = [oid for oid in self.commits if oid.startswith(rev)]
                if len(hits) == 1:
                    return hits[0]
        return None

    def writable_ref(self, rev: str) -> tuple[str, Any] | None:
        """("branch", name) or ("pr", num) when `rev` names a ref a commit may move."""
        name = rev[len("refs/heads/"):] if rev.startswith("refs/heads/") else rev
        if name in self.branches:
            return "branch", name
        if (m := re.fullmatch(r"refs/pr/(\d+)", rev)) and int(m[1]) in self.pr_refs:
            return "pr", int(m[1])
        return None

    def history(self, oid: str) -> list[Commit]:
        """First-parent history from `oid`, newest first."""
        out = []
        while oid:
            commit = self.commits[oid]
            out.append(commit)
            oid = commit.parents[0] if commit.parents else ""
        return out


def tree_oids(files: dict[str, str]) -> dict[str, str]:
    """Git tree ids of every directory ("" is the root) of a flat snapshot."""
    children: dict[str, dict[str, tuple[bool, str]]] = {"": {}}
    for path, oid in files.items():
        parts = path.split("/")
        for i in range(len(parts) - 1):
            parent, here = "/".join(parts[:i]), "/".join(parts[: i + 1])
            children.setdefault(here, {})
            children[parent][parts[i]] = (True, here)
        children["/".join(parts[:-1])][parts[-1]] = (False, oid)
    out: dict[str, str] = {}

    def visit(directory: str) -> str:
        entries = []
        for name, (is_dir, ref) in children[directory].items():
            if is_dir:
                entries.append((name + "/", b"40000 %s\0%s" % (name.encode(), bytes.fromhex(visit(ref)))))
            else:
                entries.append((name, b"100644 %s\0%s" % (name.encode(), bytes.fromhex(ref))))
        body = b"".join(raw for _, raw in sorted(entries))
        out[directory] = hashlib.sha1(b"tree %d\0" % len(body) + body).hexdigest()
        return out[directory]

    visit("")
    return out


def gitignore_matcher(text: str) -> Callable[[str], bool]:
    """A small .gitignore matcher: globs, `!` negation, trailing `/`, anchoring."""
    rules = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        line = line[1:] if negate else line
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        anchored = "/" in line
        rules.append((line.lstrip("/"), negate, dir_only, anchored))

    def ignored(path: str) -> bool:
        parts = path.split("/")
        result = False
        for pattern, negate, dir_only, anchored in rules:
            # Candidates: every directory on the path, and the file itself unless dir_only.
            last = len(parts) - 1 if dir_only else len(parts)
            for i in range(last):
                candidate = "/".join(parts[: i + 1]) if anchored else parts[i]
                if fnmatchcase(candidate, pattern) or (
                    pattern.startswith("**/") and fnmatchcase(candidate, pattern[3:])
                ):
                    result = not negate
                    break
        return result

    return ignored


def clean_path(path: Any) -> str:
    """A file path a commit may store: relative, no `.`/`..`/empty parts, not under .git, no
    control or line-separator characters, no part that is only whitespace, and short enough for
    every client to write it (MAX_PATH_PART bytes a part, MAX_PATH in all)."""
    if not isinstance(path, str):
        raise HubError(400, "Invalid path")
    parts = path.split("/")
    bad_part = any(p in ("", ".", "..") or not p.strip() or len(p.encode("utf-8", "replace")) > MAX_PATH_PART
                   for p in parts) or parts[0] == ".git"
    hidden = any(unicodedata.category(c) in ("Cc", "Cs", "Zl", "Zp") for c in path)
    if (not path or path.startswith("/") or "\\" in path or bad_part or hidden
            or len(path.encode("utf-8", "replace")) > MAX_PATH):
        raise HubError(400, f"Invalid path: {path[:200]!r}")
    return path


def check_ref_name(name: str, kind: str) -> None:
    if not name or name.startswith("refs/") or name == "HEAD" or BAD_REF_RE.search(name):
        raise HubError(400, f"Invalid {kind} name: {name!r}")

