"""Kernel dependencies (`depends = [...]`): CUTLASS headers, from wheels on PyPI.

A dependency name asks for a CUTLASS minor version (`cutlass_3_8`). Its headers come from a
wheel pinned by sha256: NVIDIA's `nvidia-cutlass` where NVIDIA published that version, else a
package that ships the tagged CUTLASS tree (see docs/cutlass.md for the table and the evidence).
pip downloads the wheel once (wheels only: nothing of it is executed); its headers
(`include/`, `tools/util/include/`) are unpacked into a cache keyed by release:

    $KBUILD_CACHE_DIR (default $XDG_CACHE_HOME/kbuild or ~/.cache/kbuild)
        cutlass/<cutlass version>-<package>-<package version>/include/...
                                                            /tools/util/include/...
                                                            /.kbuild-tree.json   (the stamp)

Before each use the cache is verified: the root, its parents and the tree must belong to you
(or root) and be writable by no one else, the tree may hold no symbolic link, and the sha256
of its file listing (`sha256sum` of every file, sorted by path) must equal the release's pinned
`tree_sha256`. A tree that fails is provisioned again, with a warning saying why; an unsafe
root is refused.

A name with no release is refused naming the key and the versions provided; with the opt-in
KBUILD_CUTLASS_SUBSTITUTE=1 (`kbuild build --cutlass-substitute`) the nearest newer provided
version is used instead, with a warning, and `provenance()` records it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import sys
import tempfile
import uuid
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..core.backend import Backend
from ..core.errors import BuildError
from ..core.layout import MANIFEST
from ..core.runner import capture

CACHE_VAR = "KBUILD_CACHE_DIR"
SUBSTITUTE_VAR = "KBUILD_CUTLASS_SUBSTITUTE"
HEADER_TREES = ("include/", "tools/util/include/")
STAMP = ".kbuild-tree.json"
Warn = Callable[[str], None]


@dataclass(frozen=True)
class Release:
    """A CUTLASS release as shipped in a wheel on PyPI."""

    cutlass: str        # CUTLASS version of the headers (include/cutlass/version.h)
    package: str        # the PyPI project whose wheel ships them
    version: str        # that project's version
    wheel: str          # the wheel's file name
    sha256: str         # of the wheel
    prefix: str         # folder of the CUTLASS tree inside the wheel
    tree_sha256: str    # of the unpacked headers (tree_digest)
    pip_target: tuple[str, ...] = ()  # pip options that pick this wheel on any machine

    @property
    def key(self) -> str:
        return f"{self.cutlass}-{self.package}-{self.version}"

    @property
    def minor(self) -> tuple[int, int]:
        major, minor = self.cutlass.split(".")[:2]
        return int(major), int(minor)


def _nvidia(cutlass: str, sha256: str, tree_sha256: str) -> Release:
    version = f"{cutlass}.0"
    return Release(cutlass, "nvidia-cutlass", version, f"nvidia_cutlass-{version}-py3-none-any.whl",
                   sha256, "cutlass_library/source/", tree_sha256)


# The newest release of each CUTLASS minor version found on PyPI (docs/cutlass.md).
RELEASES = (
    _nvidia("3.3.0", "bfae7a8bc6441e42e4171723257ea6cb1ac1cf2f107f5f946a1968503822eccc",
            "4329528b860d7d24d37736ddef322ccff5a94eefef0902f698f0c0d7c29c3b05"),
    _nvidia("3.4.1", "743c0ef66233c6ffaf348d9509ddb541d5c68f320ae85076bec0c3e047964f15",
            "7e22282b828cc50372692aa623e45878fe0d0b82bc532bd62eff8663da873195"),
    _nvidia("3.5.1", "cb90ec9fec86504c1602175fa8a96756e9502884b6aac62a03f814e6b1bb35f1",
            "700e292cd35cef27e1b5eebc112ea0a03337beab9f168eaea7b232c9c1e9472e"),
    _nvidia("3.6.0", "8b51469514e119d771e571ade9623a28de05c9ed01030666d17d4ce0b6737454",
            "e6c24de09c18f44db76e231d75f04f647cbfc16ed903cc906ea1cc07cb322f83"),
    _nvidia("3.7.0", "0a44b03359686206254d70c7a9ac79b59a14cb23e9ab04012edd78801794e4be",
            "047e3676e758b82a769026a74218ad7f05f424bea10fcdaa11e9092a8e84e5f5"),
    _nvidia("3.8.0", "013147221a63500205da233ae02e6262463917f3fe39cb09efbca37bfd1c39f9",
            "ce2d7eb75865c39d4a08fdd195b8c5e374a5bec54784577e16e4d3bda4a69886"),
    Release("4.1.0", "tilelang", "0.1.8",
            "tilelang-0.1.8-cp38-abi3-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl",
            "5a4018e581f55c852d98a42d3b4acf2dbcfb8b7d8b9156ba7c6b0ab61600a10c",
            "tilelang/3rdparty/cutlass/",
            "663de71cc9d9570a16a2acb4c711aa17397b2675774bc1843215a7784c211277",
            ("--platform", "manylinux_2_28_x86_64", "--implementation", "cp",
             "--python-version", "3.10", "--abi", "abi3")),
    _nvidia("4.2.0", "f9599ada45c7bcb6bf53f7d3f0a7d154183e53451c01bfa59eecd37dd4a693f6",
            "ab258e23e64f2fbe382a108bd9571c7862280ab30d87b4c0ed3baa36c38ec4ea"),
    Release("4.4.2", "flashinfer-python", "0.6.10", "flashinfer_python-0.6.10-py3-none-any.whl",
            "8bdfc2db80e462c41a1bc35dffeae9c6b4d012dee75e0766432c8efbdfd4398d",
            "flashinfer/data/cutlass/",
            "17c74408687cff72494654b5fb38b690f72984a98e462cbfbb4d313fdbdeab57"),
    Release("4.5.0", "flashinfer-python", "0.6.15", "flashinfer_python-0.6.15-py3-none-any.whl",
            "da6c339e14db4831ade0d593324f02907d44bd4b86b640faad4727d9e089477b",
            "flashinfer/data/cutlass/",
            "70e93af679fa67957bfae1db44c5ab1a2cf65bff935206123a7f7bb0ab9024ef"),
)
CUTLASS = {"cutlass_{}_{}".format(*r.minor): r for r in RELEASES}
# Dependencies of backends this builder does not compile.
OTHER_BACKENDS = {"sycl_tla": Backend.XPU, "metal-cpp": Backend.METAL, "cutlass_sycl": Backend.XPU}
NOT_PROVISIONED = {"torch"}  # handled by the build itself
CUTLASS_NAME = re.compile(r"cutlass_(\d+)_(\d+)")


def _accepted_names() -> set[str]:
    from ..core.manifest.forms import KERNEL_DEPENDS
    return set(KERNEL_DEPENDS)


def available() -> str:
    """The provided CUTLASS names a manifest may list, with their versions."""
    names = _accepted_names()
    return ", ".join(f"{n} ({r.cutlass})" for n, r in CUTLASS.items() if n in names)


def cache_root() -> Path:
    if os.environ.get(CACHE_VAR):
        return Path(os.environ[CACHE_VAR]).resolve()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return (Path(base) / "kbuild").resolve()


def substitute_requested() -> bool:
    return os.environ.get(SUBSTITUTE_VAR, "").strip().lower() in ("1", "true", "yes", "on")


# --- which release a name gives -----------------------------------------------------------------

@dataclass(frozen=True)
class Resolved:
    dep: str
    release: Release
    substitutes: str | None = None  # the CUTLASS version asked for, when another one is used

    def warning(self) -> str:
        r = self.release
        return (f"{self.dep}: CUTLASS {self.substitutes} is not provided; using CUTLASS {r.cutlass} "
                f"(from {r.package} {r.version}) instead, as {SUBSTITUTE_VAR}/--cutlass-substitute "
                "asks. The kernel may not compile, or may behave differently")


def resolve(dep: str, *, manifest: Path, key: str, substitute: bool | None = None) -> Resolved:
    """The release a dependency name gives, or a BuildError naming the key."""
    if dep in CUTLASS:
        return Resolved(dep, CUTLASS[dep])
    if dep in OTHER_BACKENDS:
        raise BuildError(f"{dep} is a dependency of the {OTHER_BACKENDS[dep]} backend, which this "
                         "builder cannot compile", file=manifest, key=key,
                         hint=f"remove it; dependencies provided here: torch, {available()}")
    match = CUTLASS_NAME.fullmatch(dep)
    if not match:
        raise BuildError(f"unknown dependency {dep!r}", file=manifest, key=key,
                         hint=f"dependencies provided here: torch, {available()}")
    wanted = (int(match[1]), int(match[2]))
    newer = min((r for r in RELEASES if r.minor > wanted), key=lambda r: r.minor, default=None)
    substitute = substitute_requested() if substitute is None else substitute
    if substitute and newer:
        return Resolved(dep, newer, "{}.{}".format(*wanted))
    message = (f"{dep}: CUTLASS {wanted[0]}.{wanted[1]} has no nvidia-cutlass release on PyPI, "
               "and no package there ships its tagged headers")
    if newer is None:
        raise BuildError(message + ", nor those of a newer version", file=manifest, key=key,
                         hint=f"use one that is provided: {available()}")
    raise BuildError(message, file=manifest, key=key,
                     hint=f"use one that is provided: {available()}; or build with "
                          f"--cutlass-substitute ({SUBSTITUTE_VAR}=1) to use CUTLASS "
                          f"{newer.cutlass} instead, at your own risk")


def release_for(dep: str, *, manifest: Path, key: str) -> Release:
    return resolve(dep, manifest=manifest, key=key).release


# --- the verified cache ------------------------------------------------------------------------

def trusted_uids() -> set[int]:
    """Owners whose files the cache may hold: you, and root."""
    return {os.geteuid(), 0}


def unsafe_reason(st: os.stat_result, *, sticky_ok: bool = False) -> str | None:
    """Why a file or folder with this lstat result cannot be trusted, or None."""
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if st.st_uid not in trusted_uids():
        return f"it is owned by uid {st.st_uid}, not by you"
    writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if writable and not (sticky_ok and st.st_mode & stat.S_ISVTX and stat.S_ISDIR(st.st_mode)):
        return f"other users can write it (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def make_private_dir(path: Path) -> None:
    if not path.exists():
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o755)  # whatever the umask: only the owner writes the cache


def memo_file(folder: str, key: str) -> Path | None:
    """$KBUILD_CACHE_DIR/`folder`/`key`: where a check's success is remembered (the file's
    presence, or its JSON), if that cache is safe to trust: the folder and those above it owned
    by you (or root) and writable by no one else. None where it is not."""
    base = optional_base(folder, "the load-check memo")
    return base / key if base is not None else None


_WARNED: set[str] = set()


def without_cache(reason: str) -> str:
    """Says once per process (on stderr) that the build goes on without an optional cache (a
    configure seed, a precompiled header, a memo), and why; returns the reason."""
    if reason not in _WARNED:
        _WARNED.add(reason)
        _stderr_warning(f"{reason}; going on without it")
    return reason


def optional_base(name: str, what: str) -> Path | None:
    """$KBUILD_CACHE_DIR/`name` for a cache the build can do without, or None (with a warning
    naming the folder) where it cannot be used: read-only, not writable, unsafe."""
    try:
        return trusted_base(cache_root(), name, what)
    except BuildError as e:
        without_cache(e.message)
        return None


def unwritable(what: str, path: Path, error: OSError) -> str:
    """The reason a cache entry could not be written (a full disk, a read-only folder)."""
    return without_cache(f"{what}: cannot write {path}: {error.strerror or error}")


def read_memo(path: Path | None) -> str | None:
    """The text of a memo file, when it is a plain file only you (or root) can write."""
    if path is None:
        return None
    try:
        if _unsafe_file(path):
            return None
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


def _unsafe_file(path: Path) -> bool:
    st = path.lstat()
    return not stat.S_ISREG(st.st_mode) or unsafe_reason(st) is not None


def write_memo(path: Path | None, text: str = "") -> None:
    """Writes a memo file (owner-only, atomically); a cache that cannot be written is no error."""
    if path is None:
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.chmod(0o644)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        unwritable("the load-check memo", path.parent, e)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        pass
    return True


def remove_abandoned(root: Path) -> None:
    """Removes entry folders still being written (`<key>.tmp<pid>`) by a process that is gone
    (a build killed before it could clean up)."""
    for tmp in root.glob("*.tmp*"):
        pid = tmp.name.rsplit(".tmp", 1)[1]
        if tmp.is_dir() and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True)


def prune_entries(root: Path, keep: int) -> None:
    """Removes all but the `keep` most recently used entry folders of a cache store, and folders
    abandoned half-written; folders still being written, `*.tmp<pid>`, are left alone."""
    remove_abandoned(root)
    entries = sorted((p for p in root.iterdir() if p.is_dir() and ".tmp" not in p.name),
                     key=lambda p: p.stat().st_mtime, reverse=True)
    for old in entries[keep:]:
        shutil.rmtree(old, ignore_errors=True)


def trusted_base(root: Path, name: str = "cutlass", what: str = "the CUTLASS header cache") -> Path:
    """`root`/`name`, created if missing, after checking that only you (or root) can change it
    or any folder above it; a BuildError naming the folder otherwise (also where it cannot be
    created: read-only, a file in the way, a full disk)."""
    base = root / name
    try:
        make_private_dir(root)
        make_private_dir(base)
        stats = [(path, path.lstat()) for path in [base, root, *root.parents]]
    except OSError as e:
        raise BuildError(f"{what} cannot be used: {e.filename or base}: {e.strerror or e}",
                         hint=f"make {root} a folder you can write, or set {CACHE_VAR} to one"
                         ) from None
    for path, st in stats:
        problem = unsafe_reason(st, sticky_ok=path not in (base, root))
        if problem:
            raise BuildError(f"{what} cannot be trusted: {path}: {problem}",
                             hint=f"make it yours and not writable by others (chmod go-w), or set "
                                  f"{CACHE_VAR} to a folder only you can write")
    return base


def tree_digest(files: dict[str, str]) -> str:
    """sha256 of the tree's `sha256sum` listing: '<sha256>  <path>' lines sorted by path."""
    return hashlib.sha256("".join(f"{files[p]}  {p}\n" for p in sorted(files)).encode()).hexdigest()


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _scan(tree: Path) -> tuple[dict[str, str], str | None]:
    """The files of `tree` with their sha256 (the stamp left out), or the first reason the tree
    cannot be used: a symbolic link, something not a plain file, a foreign or shared entry."""
    files: dict[str, str] = {}
    todo = [tree]
    while todo:
        folder = todo.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                path = Path(entry.path)
                rel = path.relative_to(tree).as_posix()
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    return files, f"{rel} is a symbolic link"
                problem = unsafe_reason(st)
                if problem:
                    return files, f"{rel}: {problem}"
                if stat.S_ISDIR(st.st_mode):
                    todo.append(path)
                elif not stat.S_ISREG(st.st_mode):
                    return files, f"{rel} is not a plain file"
                elif rel != STAMP:
                    files[rel] = _file_sha256(path)
    return files, None


def _differences(tree: Path, files: dict[str, str]) -> str:
    """The files that differ from the stamp written when the tree was unpacked."""
    try:
        stamped = json.loads((tree / STAMP).read_text())["files"]
        assert isinstance(stamped, dict)
    except (OSError, ValueError, KeyError, AssertionError):
        return "its headers differ from the release's and its stamp is missing or unreadable"
    changed = sorted(p for p in files.keys() & stamped.keys() if files[p] != stamped[p])
    extra = sorted(files.keys() - stamped.keys())
    missing = sorted(stamped.keys() - files.keys())
    parts = [f"{what}: {', '.join(paths[:3])}{' …' if len(paths) > 3 else ''}"
             for what, paths in (("changed", changed), ("not in the release", extra),
                                 ("missing", missing)) if paths]
    return "; ".join(parts) or "its stamp does not match the release"


def verify_tree(tree: Path, release: Release) -> str | None:
    """Why the cached tree of `release` cannot be used, or None when it is the pinned release."""
    try:
        st = tree.lstat()
    except FileNotFoundError:
        return "it is missing"
    if stat.S_ISLNK(st.st_mode):
        return f"{tree.name} is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return f"{tree.name} is not a folder"
    problem = unsafe_reason(st)
    if problem:
        return problem
    files, problem = _scan(tree)
    if problem:
        return problem
    if tree_digest(files) != release.tree_sha256:
        return _differences(tree, files)
    return None


def _download(release: Release, into: Path) -> Path:
    proc = capture([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                    "--disable-pip-version-check", *release.pip_target,
                    f"{release.package}=={release.version}", "-d", str(into)], timeout=900)
    wheel = into / release.wheel
    if proc.returncode != 0 or not wheel.is_file():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise BuildError(f"could not download {release.package} {release.version} (CUTLASS "
                         f"{release.cutlass}'s headers) from PyPI: " + " / ".join(tail),
                         hint="check the network (pip must reach PyPI) and build again")
    digest = _file_sha256(wheel)
    if digest != release.sha256:
        raise BuildError(f"{wheel.name} has sha256 {digest}, expected {release.sha256}",
                         hint="the download was altered; remove pip's cache and build again")
    return wheel


def _unpack_headers(wheel: Path, prefix: str, dest: Path) -> dict[str, str]:
    """Writes the header trees under `prefix` of `wheel` to `dest` (plain files, mode 644) and
    returns their sha256 by path."""
    files: dict[str, str] = {}
    dest.mkdir()
    dest.chmod(0o755)
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            name = info.filename
            if info.is_dir() or not name.startswith(prefix):
                continue
            rel = name.removeprefix(prefix)
            parts = rel.split("/")
            if not rel.startswith(HEADER_TREES) or any(p in ("", ".", "..") for p in parts):
                continue
            target = dest.joinpath(*parts)
            for folder in reversed(target.relative_to(dest).parents[:-1]):
                if not (dest / folder).is_dir():
                    (dest / folder).mkdir()
                    (dest / folder).chmod(0o755)
            data = zf.read(info)
            target.write_bytes(data)
            target.chmod(0o644)
            files[rel] = hashlib.sha256(data).hexdigest()
    return files


def _discard(path: Path) -> None:
    """Moves a rejected tree (or link) out of the way, then deletes it."""
    aside = path.with_name(f".rejected-{path.name}-{uuid.uuid4().hex[:8]}")
    os.rename(path, aside)
    if aside.is_symlink() or not aside.is_dir():
        aside.unlink()
    else:
        shutil.rmtree(aside, ignore_errors=True)


def _stderr_warning(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def provision(release: Release, root: Path | None = None, warn: Warn | None = None) -> Path:
    """The verified cached header tree of `release`, downloaded and unpacked when missing or
    when the cached one fails verification (with a warning saying why)."""
    warn = warn or _stderr_warning
    base = trusted_base((root or cache_root()).resolve())
    final = base / release.key
    if os.path.lexists(final):
        problem = verify_tree(final, release)
        if problem is None:
            return final
        warn(f"the cached CUTLASS {release.cutlass} headers at {final} failed verification "
             f"({problem}); provisioning them again")
        try:
            _discard(final)
        except OSError as e:
            raise BuildError(f"cannot move the rejected tree {final} aside: {e.strerror or e}",
                             hint="remove it by hand and build again") from None
    with tempfile.TemporaryDirectory(dir=base, prefix=f".{release.key}.") as tmp:
        wheel = _download(release, Path(tmp) / "wheel")
        staged = Path(tmp) / "tree"
        files = _unpack_headers(wheel, release.prefix, staged)
        if tree_digest(files) != release.tree_sha256:
            raise BuildError(f"the headers in {wheel.name} have tree sha256 {tree_digest(files)}, "
                             f"expected {release.tree_sha256}",
                             hint="the builder's pin is wrong; report it")
        stamp = {"release": release.key, "wheel_sha256": release.sha256,
                 "tree_sha256": release.tree_sha256, "files": files}
        (staged / STAMP).write_text(json.dumps(stamp, indent=1, sort_keys=True))
        (staged / STAMP).chmod(0o644)
        try:
            os.rename(staged, final)
        except OSError:
            if verify_tree(final, release) is not None:
                raise  # not a concurrent build that got there first
    return final


# --- what a plan needs -------------------------------------------------------------------------

def _resolve_plan(plan) -> dict[str, list[Resolved]]:
    """The releases each kernel of `plan` needs; every refusal before anything is downloaded."""
    manifest = plan.project / MANIFEST
    return {name: [resolve(dep, manifest=manifest, key=f"kernel.{name}.depends")
                   for dep in kernel.depends if dep not in NOT_PROVISIONED]
            for name, kernel in plan.kernels.items()}


def include_dirs(tree: Path) -> list[str]:
    return [str(tree / "include"), str(tree / "tools" / "util" / "include")]


def kernel_includes(plan, warn: Warn | None = None) -> tuple[dict[str, list[str]], list[str]]:
    """Include dirs of the provisioned dependencies by kernel of `plan`, and the roots of their
    header trees (mapped away in the binary); refusals raise, substitutions warn."""
    warn = warn or _stderr_warning
    resolved = _resolve_plan(plan)
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


def provenance(plan) -> list[dict[str, str | None]]:
    """What each provisioned dependency of `plan` is made of (for metadata), without
    downloading: the release, its source wheel and, when substituted, the version asked for."""
    seen: dict[str, dict[str, str | None]] = {}
    for needs in _resolve_plan(plan).values():
        for r in needs:
            seen[r.dep] = {"dependency": r.dep, "cutlass": r.release.cutlass,
                           "package": r.release.package, "version": r.release.version,
                           "wheel_sha256": r.release.sha256, "tree_sha256": r.release.tree_sha256,
                           "substitutes": r.substitutes}
    return [seen[d] for d in sorted(seen)]
