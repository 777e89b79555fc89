"""The verified cache of CUTLASS header trees, one folder per release:

    $KBUILD_CACHE_DIR (default $XDG_CACHE_HOME/kbuild or ~/.cache/kbuild)
        cutlass/<version>-<first 16 hex digits of the tree digest>/include/...
                                                                  /tools/util/include/...
                                                                  /.kbuild-tree.json  (the stamp)

The folder's name does not depend on the source that filled it, and nothing in it names a path
of this machine: a cache filled on one machine is used as is on another (an offline one).

Before each use the tree is verified: the root, its parents and the tree must belong to you
(or root) and be writable by no one else (deps.trusted_base), the tree may hold nothing but
plain files and folders, the files the builder generates must be what it generates, and the
tree digest of the others must equal the release's. A tree that fails is set aside and
provisioned again, with a warning saying why; an unsafe root is refused.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
import uuid
from pathlib import Path
from typing import Callable

from ....core.errors import BuildError
from ....core.locking import locked_folder
from ....core import deps
from .releases import Release
from .sources import URL_VAR, Note, Unreachable, fetch, name_problem, shown, sources

STAMP = ".kbuild-tree.json"
Warn = Callable[[str], None]


def tree_digest(files: dict[str, str]) -> str:
    r"""sha256 of the tree's `sha256sum` listing: a line '<sha256>  <path>' per file, sorted by
    path. A path holding a backslash, newline or carriage return is escaped as GNU sha256sum
    escapes it (`\\`, `\n`, `\r`, and the line starts with a backslash), so no path can pass
    for two lines: the listing, and so the digest, names exactly one set of files."""
    lines = []
    for path in sorted(files):
        if any(c in path for c in "\\\n\r"):
            escaped = path.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
            lines.append(f"\\{files[path]}  {escaped}\n")
        else:
            lines.append(f"{files[path]}  {path}\n")
    return hashlib.sha256("".join(lines).encode("utf-8", "surrogateescape")).hexdigest()


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _scan(tree: Path) -> tuple[dict[str, str], str | None]:
    """The files of `tree` with their sha256 (the stamp left out), or the first reason the tree
    cannot be used: a symbolic link, something not a plain file, a foreign or shared entry, a
    name that is not UTF-8 text, something that cannot be read or is gone meanwhile."""
    files: dict[str, str] = {}
    todo = [tree]
    try:
        while todo:
            folder = todo.pop()
            with os.scandir(folder) as entries:
                for entry in entries:
                    path = Path(entry.path)
                    rel = path.relative_to(tree).as_posix()
                    if name_problem(rel):
                        return files, f"{shown(rel)}: {name_problem(rel)}"
                    st = entry.stat(follow_symlinks=False)
                    if stat.S_ISLNK(st.st_mode):
                        return files, f"{rel} is a symbolic link"
                    problem = deps.unsafe_reason(st)
                    if problem:
                        return files, f"{rel}: {problem}"
                    if stat.S_ISDIR(st.st_mode):
                        todo.append(path)
                    elif not stat.S_ISREG(st.st_mode):
                        return files, f"{rel} is not a plain file"
                    elif rel != STAMP:
                        files[rel] = _file_sha256(path)
    except FileNotFoundError:
        return files, "it changed while it was read (another build replacing it?)"
    except OSError as e:
        where = os.path.relpath(e.filename, tree) if isinstance(e.filename, str) else tree.name
        return files, f"{shown(where)}: cannot be read ({e.strerror or e})"
    return files, None


def read_stamp(tree: Path) -> dict | None:
    try:
        stamp = json.loads((tree / STAMP).read_text())
    except (OSError, ValueError):
        return None
    return stamp if isinstance(stamp, dict) else None


def _differences(tree: Path, files: dict[str, str]) -> str:
    """The files that differ from the stamp written when the tree was unpacked."""
    stamped = (read_stamp(tree) or {}).get("files")
    if not isinstance(stamped, dict):
        return "its headers differ from the release's and its stamp is missing or unreadable"
    changed = sorted(p for p in files.keys() & stamped.keys() if files[p] != stamped[p])
    extra = sorted(files.keys() - stamped.keys())
    missing = sorted(stamped.keys() - files.keys())
    parts = [f"{what}: {', '.join(paths[:3])}{' …' if len(paths) > 3 else ''}"
             for what, paths in (("changed", changed), ("not in the release", extra),
                                 ("missing", missing)) if paths]
    return "; ".join(parts) or "its stamp does not match the release"


def verify_tree(tree: Path, release: Release) -> str | None:
    """Why the cached tree of `release` cannot be used, or None when it is the release."""
    try:
        st = tree.lstat()
    except FileNotFoundError:
        return "it is missing"
    if stat.S_ISLNK(st.st_mode):
        return f"{tree.name} is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return f"{tree.name} is not a folder"
    problem = deps.unsafe_reason(st)
    if problem:
        return problem
    files, problem = _scan(tree)
    if problem:
        return problem
    generated = release.generated_sha256()
    if any(files.get(p) != sha for p, sha in generated.items()) or \
            tree_digest({p: s for p, s in files.items() if p not in generated}) != release.tree_sha256:
        return _differences(tree, files)
    return None


def _set_aside(path: Path) -> None:
    """Moves a rejected tree (or link) out of the way, then deletes it (what cannot be deleted
    stays under a `.rejected-` name, never used)."""
    aside = path.with_name(f".rejected-{path.name}-{uuid.uuid4().hex[:8]}")
    os.rename(path, aside)
    if aside.is_symlink() or not aside.is_dir():
        aside.unlink()
    else:
        shutil.rmtree(aside, ignore_errors=True)


def tree_path(release: Release, root: Path | None = None) -> Path:
    """Where the tree of `release` is cached (nothing is checked or created)."""
    return (root or deps.cache_root()).resolve() / "cutlass" / release.key


def provision(release: Release, root: Path | None = None, warn: Warn | None = None,
              note: Note | None = None) -> Path:
    """The verified cached header tree of `release`, fetched and unpacked when missing or when
    the cached one fails verification (with a warning saying why). Builds that provision at
    the same time take turns (a lock on the cache's `cutlass/` folder), and each verifies what
    it finds once its turn comes. A rejected tree stays where it is, never used, until a
    verified replacement is there to take its place. `note` is told what is downloaded."""
    warn = warn or deps.stderr_warning
    base = deps.trusted_base((root or deps.cache_root()).resolve(), "cutlass", "the CUTLASS header cache")
    final = base / release.key
    if os.path.lexists(final) and verify_tree(final, release) is None:
        return final
    with locked_folder(base):
        kept = None
        if os.path.lexists(final):
            problem = verify_tree(final, release)
            if problem is None:
                return final  # another build provisioned it meanwhile
            warn(f"the cached CUTLASS {release.version} headers at {final} failed verification "
                 f"({problem}); provisioning them again")
            kept = final
        with tempfile.TemporaryDirectory(dir=base, prefix=f".{release.key}.") as tmp:
            staged = _staged(release, Path(tmp), kept, note or deps.stderr_note)
            if kept is not None:
                try:
                    _set_aside(kept)
                except OSError as e:
                    raise BuildError(f"cannot move the rejected tree {final} aside: "
                                     f"{e.strerror or e}",
                                     hint="remove it by hand and build again") from None
            os.rename(staged, final)  # a whole tree renamed into place, not core/files.write_atomic's one file
    return final


def _staged(release: Release, tmp: Path, kept: Path | None, note: Note) -> Path:
    """The release's tree fetched, verified and stamped in `tmp`."""
    staged = tmp / "tree"
    source, files = _fetch_first(release, staged, tmp, kept, note)
    digest = tree_digest(files)
    if digest != release.tree_sha256:
        raise BuildError(f"the headers from {source.describe()} have tree sha256 {digest}, "
                         f"expected CUTLASS {release.version}'s {release.tree_sha256}",
                         hint=f"nothing was cached: that source is not NVIDIA's {release.tag} "
                              f"release (check {URL_VAR} if you set it)")
    for rel, data in release.generated_files().items():
        (staged / rel).write_bytes(data)
        (staged / rel).chmod(0o644)
    generated = release.generated_sha256()
    stamp = {"release": release.version, "tag": release.tag, "tree_sha256": release.tree_sha256,
             "source": source.record(), "generated": generated, "files": {**files, **generated}}
    (staged / STAMP).write_text(json.dumps(stamp, indent=1, sort_keys=True))
    (staged / STAMP).chmod(0o644)
    return staged


def _fetch_first(release: Release, staged: Path, scratch: Path, kept: Path | None, note: Note):
    """The first source of `release` that can be reached, and the files it gave."""
    failures = []
    for n, source in enumerate(sources(release)):
        shutil.rmtree(staged, ignore_errors=True)
        try:
            return source, fetch(source, release, staged, scratch / f"download{n}", note)
        except Unreachable as e:
            failures.append(f"{source.describe()}: {e}")
    kept_note = (f"; the rejected tree {kept} was kept as it is (never used): fix what the "
                 "warning above names and build again, or " if kept else "; ")
    raise BuildError(f"could not download CUTLASS {release.version}'s headers: "
                     + "; ".join(failures),
                     hint=f"check the network, or set {URL_VAR} to a mirror of NVIDIA's tag "
                          f"archives{kept_note}use a cache filled elsewhere on an offline "
                          "machine (docs/cutlass.md)")
