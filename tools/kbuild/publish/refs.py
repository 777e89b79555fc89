"""The names kbuild reads and writes on the Hub, checked before anything is read or written: a
repo id (`org/name`), a branch (git's `check-ref-format` rules for a branch, and the Hub's own),
a version branch that agrees with the variants' version, and a release tag. `hub_target`: the
`hub_repo` and `hub_branch`: the repo and branch of a project (upload, api-diff), from the
options or build.toml; `download_build` (verify and to-wheel --repo-id) checks its repo id here."""

from __future__ import annotations

import re
from pathlib import Path

from ..core.errors import BuildError
from ..core.layout import MANIFEST
from ..core.manifest import General

REPO_ID = re.compile(r"[\w.-]+/[\w.-]+")
VERSION_BRANCH = re.compile(r"v(\d+)")
ALLOWED = re.compile(r"[A-Za-z0-9._/-]+")
BRANCH_HINT = ("letters, digits, `.`, `_`, `-` and `/`; no `..`, no part starting with `.` or "
               "ending with `.lock`, not `HEAD`, nothing under `refs/`; e.g. main or v1")


def branch_problem(branch: str) -> str | None:
    """Why `branch` is not a name git and the Hub accept for a branch, or None."""
    if not branch:
        return "is empty (leave --branch out for the default: [general.hub] branch, else v<version>)"
    if len(branch) > 200:
        return "is longer than 200 characters"
    if not ALLOWED.fullmatch(branch):
        bad = sorted({c for c in branch if not ALLOWED.fullmatch(c)})
        return f"has characters a branch name cannot have ({' '.join(map(repr, bad))})"
    if branch == "HEAD":
        return "is HEAD, which git reserves"
    if branch.startswith("refs/"):
        return "is under refs/, which the Hub reserves (refs/pr/N are its pull requests)"
    if branch.startswith("-"):
        return "starts with `-`"
    if branch.startswith("/") or branch.endswith("/") or "//" in branch:
        return "has an empty part (a leading, trailing or double `/`)"
    if ".." in branch:
        return "has `..`"
    if branch.endswith("."):
        return "ends with `.`"
    for part in branch.split("/"):
        if part.startswith("."):
            return f"has a part {part!r} that starts with `.`"
        if part.endswith(".lock"):
            return f"has a part {part!r} that ends with `.lock`"
    return None


def check_branch(branch: str, *, key: str = "--branch") -> str:
    """`branch`, or one BuildError saying why git or the Hub would refuse it."""
    problem = branch_problem(branch)
    if problem:
        raise BuildError(f"{key} {branch!r} is not a branch name: it {problem}", key=key,
                         hint=BRANCH_HINT)
    return branch


def check_branch_version(branch: str, version: int, *, key: str = "--branch") -> None:
    """A `v<N>` branch is where `kernels` looks for version N: the variants must be version N."""
    m = VERSION_BRANCH.fullmatch(branch)
    if m and int(m[1]) != version:
        raise BuildError(f"{key} {branch} is where `kernels` finds version {int(m[1])}, and the "
                         f"variants are version {version}", key=key,
                         hint=f"upload version {version} to v{version} (leave --branch out), or "
                              "set general.version and rebuild")


def check_tag(tag: str, version: int) -> None:
    m = re.fullmatch(r"v(\d+)\.(\d+)\.(\d+)", tag)
    if not m:
        raise BuildError(f"--tag {tag!r} is not a full release tag like v{version}.0.0")
    if int(m[1]) != version:
        raise BuildError(f"--tag {tag} does not belong to version {version} (branch v{version})",
                         hint=f"use v{version}.<minor>.<patch>, or bump general.version")


def check_repo_id(repo_id: str) -> str:
    """`repo_id`, or one BuildError when it is not of the form org/name."""
    if not REPO_ID.fullmatch(repo_id):
        raise BuildError(f"repo id {repo_id!r} is not of the form org/name", key="--repo-id")
    return repo_id


def hub_repo(project: Path, general: General, repo_id: str | None, *, purpose: str) -> str:
    """--repo-id, else build.toml's [general.hub] repo-id; one of them, of the form org/name."""
    repo_id = repo_id or general.hub.repo_id
    if not repo_id:
        raise BuildError(f"no repo id to {purpose}", file=project / MANIFEST,
                         key="general.hub.repo-id", hint="set it in build.toml or pass --repo-id")
    return check_repo_id(repo_id)


def hub_branch(general: General, branch: str | None) -> str:
    """--branch, else build.toml's [general.hub] branch, else v<version>: a name git and the Hub
    accept, and a `v<N>` branch only for version N."""
    if branch is not None:
        given, key = check_branch(branch), "--branch"
    else:
        given, key = (check_branch(general.hub.branch, key="general.hub.branch")
                      if general.hub.branch else f"v{general.version}"), "general.hub.branch"
    check_branch_version(given, general.version, key=key)
    return given
