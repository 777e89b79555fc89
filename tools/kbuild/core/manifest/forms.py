"""The forms of `build.toml` values: names, versions, capabilities, URLs, flags and paths.

Each is an annotated type that the model uses, so a value of the wrong form fails validation
with a message that says what form is expected. Every string that can reach a generated file
has a strict form here (or, for flags and paths, at least no control characters).
"""

from __future__ import annotations

import re
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, StrictInt, StrictStr

from ..backend import GENERAL_PYTHON_DEPENDS, Backend

# The backends upstream knows, by name (the closed set and what each needs: core/backend.py).
BACKENDS = tuple(Backend.names())
# Every `depends` name upstream accepts (kernel-builder's Dependency enum, old and new), plus
# the CUTLASS releases this builder provisions.
KERNEL_DEPENDS = ("torch", "cutlass_2_10", "cutlass_3_5", "cutlass_3_6", "cutlass_3_8",
                  "cutlass_3_9", "cutlass_4_0", "cutlass_4_1", "cutlass_4_2", "cutlass_4_3",
                  "cutlass_4_4", "cutlass_4_5", "cutlass_sycl", "sycl_tla", "metal-cpp")
# Python dependencies upstream allows: `general` ones anywhere, the others only in the
# `[general.<backend>]` table of their backend.
PYTHON_DEPENDS = {"general": GENERAL_PYTHON_DEPENDS,
                  **{b.value: b.needs.python_depends for b in Backend
                     if b.needs.python_depends is not None}}
# Suffixes that a compiler turns into an object file; everything else in `src` (.h .hh .hpp
# .cuh .inc …) is only included, so it may be shared freely between kernels.
COMPILED_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".c++", ".cu", ".hip", ".m", ".mm", ".metal")
GIT_SCHEMES = ("https", "http", "git", "ssh", "git+ssh", "git+https", "git+http")

NAME_RE = re.compile(r"^[a-z][-a-z0-9]*[a-z0-9]$")
KERNEL_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]*$")
CAPABILITY_RE = re.compile(r"^[0-9]{1,2}\.[0-9]{1,2}[af]?(\+PTX)?$")
ROCM_ARCH_RE = re.compile(r"^gfx[0-9a-f]{2,5}(:[a-z]+[+-])*$")
LICENSE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
PYEXT_RE = re.compile(r"^\.?[A-Za-z0-9_-]{1,32}$")
GIT_REF_RE = re.compile(r"^(?![-/.])(?!.*(//|\.\.|@\{|\.lock$|/$|\.$))[A-Za-z0-9._/+-]+$")
VERSION_PART_RE = re.compile(r"^[0-9]{1,6}$")
NAME_MAX, TEXT_MAX = 100, 1000


def _no_control(value: str, what: str) -> str:
    if not value:
        raise ValueError(f"{what} is empty")
    if len(value) > TEXT_MAX:
        raise ValueError(f"{what} is longer than {TEXT_MAX} characters")
    bad = sorted({c for c in value if ord(c) < 32 or ord(c) == 127})
    if bad:
        raise ValueError(f"{what} {value!r} contains control characters {bad!r}")
    return value


def kernel_project_name(value: str) -> str:
    if not NAME_RE.match(value) or len(value) > NAME_MAX:
        raise ValueError(f"{value!r} must match {NAME_RE.pattern}: lowercase letters, digits and "
                         f"dashes, starting with a letter, at least 2 and at most {NAME_MAX} "
                         "characters (e.g. `my-kernel`)")
    return value


def kernel_section_name(value: str) -> str:
    if not KERNEL_NAME_RE.match(value) or len(value) > NAME_MAX:
        raise ValueError(f"kernel section name {value!r} must match {KERNEL_NAME_RE.pattern} "
                         f"(letters, digits, `_` and `-`, at most {NAME_MAX} characters)")
    return value


def version_form(parts: int):
    """A dotted version of at most `parts` significant numbers, normalised to exactly `parts`
    (upstream's `Version<N>`: "12" is "12.0", "12.8.0" is "12.8")."""
    example = ".".join(["2", "9", "0"][:parts])

    def check(value: str) -> str:
        text = value.strip()
        numbers = text.split(".")
        if not text or not all(VERSION_PART_RE.match(n) for n in numbers):
            raise ValueError(f"{value!r} is not a version; write it like \"{example}\"")
        values = [int(n) for n in numbers]
        while len(values) > parts and values[-1] == 0:
            values.pop()
        if len(values) > parts:
            raise ValueError(f"{value!r} has more than {parts} parts; write it like \"{example}\"")
        return ".".join(str(n) for n in values + [0] * (parts - len(values)))
    return check


def capability(value: str) -> str:
    if not CAPABILITY_RE.match(value):
        raise ValueError(f"invalid CUDA capabilities entry {value!r}; write it like \"9.0\", "
                         "\"9.0a\", \"10.0f\", \"12.1\" or \"8.0+PTX\"")
    return value


def rocm_arch(value: str) -> str:
    if not ROCM_ARCH_RE.match(value):
        raise ValueError(f"invalid ROCm architecture {value!r}; write it like \"gfx942\" or "
                         "\"gfx90a\"")
    return value


def kernel_dependency(value: str) -> str:
    if value not in KERNEL_DEPENDS:
        raise ValueError(f"unknown dependencies: {value!r}; known: {', '.join(KERNEL_DEPENDS)}")
    return value


def repo_id(value: str) -> str:
    from huggingface_hub.utils import HFValidationError, validate_repo_id  # ~0.1 s: only when used

    try:
        validate_repo_id(value)
    except HFValidationError:
        ok = False
    else:
        ok = value.count("/") == 1
    if not ok:
        raise ValueError(f"{value!r} is not a Hub repo id; expected `org/name` (letters, digits, "
                         "`-`, `_`, `.`; no `..` or `--`; at most 96 characters each)")
    return value


def git_ref(value: str) -> str:
    if not GIT_REF_RE.match(value) or len(value) > NAME_MAX:
        raise ValueError(f"{value!r} is not a valid branch or revision name")
    return value


def git_url(value: str) -> str:
    """A git repository URL (`https://…`, `ssh://…`, …) or scp-like `user@host:path`."""
    _no_control(value, "URL")
    if any(c.isspace() for c in value):
        raise ValueError(f"{value!r} is not a git URL (it contains spaces)")
    if "://" in value:
        parts = urlsplit(value)
        if parts.scheme not in GIT_SCHEMES or not parts.netloc:
            raise ValueError(f"{value!r} is not a git URL; the scheme must be one of "
                             f"{', '.join(GIT_SCHEMES)}")
        return value
    host, sep, path = value.partition(":")
    if sep and host and path and not path.startswith("/") and "/" not in host:
        return value
    raise ValueError(f"{value!r} is not a git URL (e.g. https://github.com/org/repo)")


def license_id(value: str) -> str:
    if not LICENSE_RE.match(value) or len(value) > 64:
        raise ValueError(f"{value!r} is not a license identifier (e.g. \"apache-2.0\", \"mit\")")
    return value


def pyext(value: str) -> str:
    if not PYEXT_RE.match(value):
        raise ValueError(f"{value!r} is not a file extension (e.g. \"py\", \"json\")")
    return value


def flag(value: str) -> str:
    return _no_control(value, "flag")


def path(value: str) -> str:
    return _no_control(value, "path")


Str = StrictStr
Int = Annotated[StrictInt, Field(ge=0)]
ProjectName = Annotated[StrictStr, AfterValidator(kernel_project_name)]
Version2 = Annotated[StrictStr, AfterValidator(version_form(2))]
Version3 = Annotated[StrictStr, AfterValidator(version_form(3))]
Capability = Annotated[StrictStr, AfterValidator(capability)]
RocmArch = Annotated[StrictStr, AfterValidator(rocm_arch)]
Dependency = Annotated[StrictStr, AfterValidator(kernel_dependency)]
RepoId = Annotated[StrictStr, AfterValidator(repo_id)]
GitRef = Annotated[StrictStr, AfterValidator(git_ref)]
GitUrl = Annotated[StrictStr, AfterValidator(git_url)]
License = Annotated[StrictStr, AfterValidator(license_id)]
PyExt = Annotated[StrictStr, AfterValidator(pyext)]
Flag = Annotated[StrictStr, AfterValidator(flag)]
Path = Annotated[StrictStr, AfterValidator(path)]
