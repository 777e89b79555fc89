"""The names `kbuild upload` writes to on the Hub, checked before anything is read or written:
a branch (git's `check-ref-format` rules for a branch, and the Hub's own), a version branch that
agrees with the variants' version, and a release tag."""

from __future__ import annotations

import re

from ..core.errors import BuildError

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
