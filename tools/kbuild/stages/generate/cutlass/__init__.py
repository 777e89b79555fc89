"""CUTLASS headers for kernels that list `depends = ["cutlass_X_Y"]`: NVIDIA's tagged release
upstream kernel-builder pins for that name, verified by the digest of its header trees.

- releases.py: names → releases (version, tree digest, sources), refusals, opt-in substitution;
- sources.py: fetching a release from a pinned wheel or NVIDIA's tag archive (or a mirror);
- cache.py: the verified cache the trees are kept in and checked from on every use;
- here: what a plan needs (include folders by kernel) and what it used (provenance).
"""

from __future__ import annotations

from pathlib import Path

from ....core.backend import Backend
from ....core.errors import BuildError
from ....core.layout import MANIFEST
from ....core import deps
from ...toolchain import NVCC_SAFE, NVCC_SAFE_TEXT
from .cache import STAMP, Warn, provision, read_stamp, tree_digest, tree_path, verify_tree
from .releases import (CUTLASS, NOT_PROVISIONED, RELEASES, SUBSTITUTE_VAR, UPSTREAM, Release, Resolved,
                       Wheel, available, resolve, substitute_requested)
from .sources import DEFAULT_URL, SOURCE_KEYS, URL_VAR, archive_url

__all__ = ["CUTLASS", "DEFAULT_URL", "RELEASES", "STAMP", "SUBSTITUTE_VAR", "UPSTREAM", "URL_VAR",
           "Release", "Resolved", "Wheel", "archive_url", "available", "include_dirs",
           "kernel_includes", "provenance", "provision", "read_stamp", "resolve", "substitute_requested",
           "tree_digest", "verify_tree"]


def _resolve_plan(plan) -> dict[str, list[Resolved]]:
    """The releases each kernel of `plan` needs; every refusal before anything is downloaded."""
    manifest = plan.project / MANIFEST
    return {name: [resolve(dep, manifest=manifest, key=f"kernel.{name}.depends")
                   for dep in kernel.depends if dep not in NOT_PROVISIONED]
            for name, kernel in plan.kernels.items()}


def _refuse_paths_nvcc_cannot_take(plan, resolved: dict[str, list[Resolved]]) -> None:
    """A CUDA kernel's CUTLASS headers reach nvcc by their path in the cache: a cache whose path
    nvcc would hand to a shell (a space, `$`) is refused naming KBUILD_CACHE_DIR, before
    anything is downloaded into it."""
    for name, needs in resolved.items():
        if plan.kernels[name].backend != Backend.CUDA or not needs:
            continue
        tree = tree_path(needs[0].release)
        if not NVCC_SAFE.match(str(tree)):
            bad = "".join(sorted({c for c in str(tree) if not NVCC_SAFE.match(c)}))
            root = tree.parent.parent
            raise BuildError(f"the CUTLASS header cache {root} has {bad!r} in its path, which nvcc "
                             f"would pass to a shell: kernel {name} cannot include headers from "
                             "there",
                             hint=f"set {deps.CACHE_VAR} to a folder whose path has only "
                                  f"{NVCC_SAFE_TEXT} (the cache is {root} now)")


def include_dirs(tree: Path) -> list[str]:
    return [str(tree / "include"), str(tree / "tools" / "util" / "include")]


def kernel_includes(plan, warn: Warn | None = None) -> tuple[dict[str, list[str]], list[str]]:
    """Include dirs of the provisioned dependencies by kernel of `plan`, and the roots of their
    header trees (mapped away in the binary); refusals raise, substitutions warn."""
    warn = warn or deps.stderr_warning
    resolved = _resolve_plan(plan)
    _refuse_paths_nvcc_cannot_take(plan, resolved)
    trees: dict[Release, Path] = {}
    warned: set[str] = set()
    out: dict[str, list[str]] = {}
    for name, needs in resolved.items():
        dirs: list[str] = []
        for r in needs:
            if r.substitutes and r.dep not in warned:
                warned.add(r.dep)
                warn(r.warning())
            if r.release not in trees:
                trees[r.release] = provision(r.release, warn=warn)
            dirs += include_dirs(trees[r.release])
        out[name] = list(dict.fromkeys(dirs))
    return out, sorted({str(t) for t in trees.values()})


def provenance(plan) -> list[dict]:
    """What each provisioned dependency of `plan` is made of (for metadata), without
    downloading: the release, its tree digest, the source its cached tree came from (a wheel
    and its sha256, or an archive's URL), the files the builder generated, and, when
    substituted, the version asked for."""
    seen: dict[str, dict] = {}
    for needs in _resolve_plan(plan).values():
        for r in needs:
            stamp = read_stamp(tree_path(r.release)) or {}
            source = stamp.get("source") if stamp.get("tree_sha256") == r.release.tree_sha256 else None
            source = source if isinstance(source, dict) else {}
            seen[r.dep] = {"dependency": r.dep, "cutlass": r.release.version, "tag": r.release.tag,
                           "tree_sha256": r.release.tree_sha256,
                           **{k: v for k, v in source.items() if k in SOURCE_KEYS and isinstance(v, str)},
                           "generated": r.release.generated_sha256() or None,
                           "substitutes": r.substitutes}
    return [seen[d] for d in sorted(seen)]
