"""The manifest's paths: each source inside the project, and no source compiled twice into a variant.

What one variant compiles: the binding's sources ([torch] or [tvm-ffi] `src`) and the kernels of
the variant's backend (as upstream: a `cpu` kernel is part of the `cpu` variant only). A compiled
file (.cpp, .cu, …) may appear in several kernel sections, also of one backend: there it is
compiled once, for all those kernels' capabilities. It may not be both a binding source and a
kernel source, nor be listed twice in one section; headers (.h .cuh .inc, …) may be shared freely.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import BuildError
from ..layout import MANIFEST, TORCH_EXT
from .forms import COMPILED_SUFFIXES
from .model import Manifest


def inside(project: Path, path: Path) -> bool:
    """Whether `path`, with every link followed, is within `project` (a resolved directory)."""
    try:
        return path.resolve().is_relative_to(project)
    except (OSError, RuntimeError, ValueError):
        return False


def resolve_source(project: Path, rel: str, *, manifest_path: Path, key: str,
                   kind: str = "file") -> Path:
    """Resolves a manifest path, refusing ones that escape the project (`..`, absolute, symlinks)."""
    if os.path.isabs(rel) or rel.startswith("~"):
        raise BuildError(f"{rel!r} is an absolute path", file=manifest_path, key=key,
                         hint="use a path relative to the project directory")
    try:
        target = (project / rel).resolve()
        outside = not target.is_relative_to(project)
        exists = not outside and (target.is_file() if kind == "file" else target.is_dir())
    except (OSError, RuntimeError, ValueError) as e:
        raise BuildError(f"cannot read {rel!r}: {e}", file=manifest_path, key=key,
                         hint=f"fix the path in {MANIFEST}") from None
    if outside:
        raise BuildError(f"{rel!r} points outside the project", file=manifest_path, key=key,
                         hint="keep sources inside the project directory (no `..` or symlinks out)")
    if not exists:
        raise BuildError(f"{kind} {rel!r} does not exist", file=manifest_path, key=key,
                         hint=f"create it or fix the path in {MANIFEST}")
    return target


def compiled(path: Path) -> bool:
    return path.suffix.lower() in COMPILED_SUFFIXES


def _groups(manifest: Manifest) -> list[tuple[str, list[str], str]]:
    binding = manifest.binding
    key = "torch" if manifest.torch else "tvm-ffi"
    groups = [(f"{key}.src", binding.src, "file"), (f"{key}.include", binding.include, "dir")] \
        if binding else []
    for name, kernel in manifest.kernel.items():
        groups += [(f"kernel.{name}.src", kernel.src, "file"),
                   (f"kernel.{name}.include", kernel.include, "dir")]
    return groups


def _check_compiled_once(manifest: Manifest, sources: dict[str, list[Path]], path: Path) -> None:
    binding = "torch.src" if manifest.torch else "tvm-ffi.src"
    in_binding = {f for f in sources.get(binding, []) if compiled(f)}
    for key, files in sources.items():
        seen: set[Path] = set()
        for resolved in files:
            if not compiled(resolved):
                continue
            rel = resolved.relative_to(path.parent).as_posix()
            if resolved in seen:
                raise BuildError(f"{rel!r} is listed twice", file=path, key=key,
                                 hint="list each source once")
            seen.add(resolved)
            if key != binding and resolved in in_binding:
                raise BuildError(f"{rel!r} would be compiled twice into a variant (also in "
                                 f"`{binding}`)", file=path, key=key,
                                 hint="compile it either in the binding or in kernels, not both; "
                                      "headers may be shared")


def check_paths(manifest: Manifest, project: Path, path: Path) -> None:
    """Every path exists inside the project, no variant compiles a file twice, and the Python
    package `torch-ext/<module>/` is there."""
    sources: dict[str, list[Path]] = {}
    for key, rels, kind in _groups(manifest):
        resolved = [resolve_source(project, rel, manifest_path=path, key=key, kind=kind)
                    for rel in rels]
        if kind == "file":
            sources[key] = resolved
    _check_compiled_once(manifest, sources, path)
    if manifest.is_tvm_ffi:
        return
    module_dir = project / TORCH_EXT / manifest.general.module_name
    rel = module_dir.relative_to(project).as_posix()
    if module_dir.exists() and not inside(project, module_dir):
        raise BuildError(f"{rel} points outside the project", file=path, key="general.name",
                         hint="make it a directory of the project, not a link out")
    if not (module_dir / "__init__.py").is_file():
        raise BuildError(f"missing Python package {rel}/__init__.py", file=path, key="general.name",
                         hint="the package under torch-ext/ must be named after general.name "
                              "with '-' turned into '_'")
