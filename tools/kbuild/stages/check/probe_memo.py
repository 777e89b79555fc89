"""The load memo: a successful load of a variant folder with `kernels` (stages/check/__init__.py), kept in
$KBUILD_CACHE_DIR/probed/ so that checking the same files again does not import torch again.

- Key (looked up before a load): sha256 of the folder's name and every file that ships from it
  (relative path and sha256; bytecode never ships; the signature bundle, which a load never
  reads, left out), the interpreter as a load sees it
  (resources/scripts/loader_identity.py: its path, version and module path, and torch, kernels
  and huggingface_hub with a fingerprint of their installed files), the loader's environment
  variables, and the probe script itself (what it records, the API included, changes with it).
- Memo (written after a successful load): the ops, the public API, and the files the load
  depended on outside the folder as the probe interpreter found them after the import (the file
  of every module in
  `sys.modules`, every file it mapped: shared libraries, every module `kernels` looked up for
  `python-depends`), named by a list in `probed/files-<sha256>` and held as the sha256 of each
  one's (inode, size, mtime). A memo is used only while each of those files still has them; a
  missing one, a replaced one (another inode), a rewritten one (mtime) misses.
- Nothing is written when the folder's files changed between the start and the end of the load
  (their inode, size, mtime and status-change time), nor for a failure.
- KBUILD_PROBE_MEMO=off (0, false, no, none, disabled) turns it off.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from importlib import resources
from pathlib import Path

from ...core.built import shipped_files
from ...core.layout import SIGNATURE
from ...core.runner import capture
from ...core.switches import switch
from ...core import deps

PROBE_MEMO_VAR = "KBUILD_PROBE_MEMO"
FOLDER = "probed"
# What, besides the interpreter's files, a `kernels` load of a variant folder depends on.
_LOADER_ENV = re.compile(r"^(LD_LIBRARY_PATH|LD_PRELOAD|PYTHONPATH|PYTHONHOME|PYTHONSAFEPATH"
                         r"|LOCAL_KERNELS|(CUDA|TORCH|PYTORCH|KERNELS)_\w*)$")
_IDENTITIES: dict[str, str | None] = {}


def loader_identity(python: str) -> str | None:
    """The target interpreter as a `kernels` load sees it, read once per process; None when it
    cannot be read."""
    if python not in _IDENTITIES:
        script = resources.files("kbuild") / "resources" / "scripts" / "loader_identity.py"
        proc = capture([python, str(script)], timeout=120)
        out = proc.stdout.strip()
        _IDENTITIES[python] = out if proc.returncode == 0 and out.startswith("{") else None
    return _IDENTITIES[python]


def folder_fingerprint(folder: Path) -> str:
    """sha256 of the folder's name and of every file that ships from it (path and bytes), but
    its signature bundle, which a load never reads (so it is never read here either)."""
    digest = hashlib.sha256(folder.name.encode() + b"\0")
    for path in shipped_files(folder):
        if path.relative_to(folder).as_posix() == SIGNATURE:
            continue
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def snapshot(folder: Path) -> list:
    """The shipped files of `folder` as the file system has them: any write, replacement,
    addition or removal changes it (cheap: no file is read)."""
    out: list = []
    for path in shipped_files(folder):
        try:
            st = path.stat()
        except OSError:  # gone meanwhile: the snapshot after the load will differ
            out.append([path.relative_to(folder).as_posix(), None])
            continue
        out.append([path.relative_to(folder).as_posix(), st.st_ino, st.st_size, st.st_mtime_ns,
                    st.st_ctime_ns])
    return out


def file_state(paths: list[str]) -> str:
    """sha256 of each file's (inode, size, mtime); a missing file counts as such."""
    states = []
    for path in paths:
        try:
            st = os.stat(path)
            states.append([path, st.st_ino, st.st_size, st.st_mtime_ns])
        except OSError:
            states.append([path, None])
    return hashlib.sha256(json.dumps(states).encode()).hexdigest()


def _probe_script() -> str:
    """The sha256 of resources/scripts/probe_variant.py, which makes what a memo holds."""
    script = resources.files("kbuild") / "resources" / "scripts" / "probe_variant.py"
    return hashlib.sha256(script.read_bytes()).hexdigest()


def key(variant: Path, python: str) -> str | None:
    """The memo key of `variant` loaded in `python` (None: memo off or the interpreter unreadable)."""
    if not switch(PROBE_MEMO_VAR):
        return None
    identity = loader_identity(python)
    if identity is None:
        return None
    env = sorted((k, v) for k, v in os.environ.items() if _LOADER_ENV.match(k))
    try:
        text = json.dumps([folder_fingerprint(variant), identity, env, _probe_script()])
    except OSError:  # a file changed under us: no memo this time
        return None
    return hashlib.sha256(text.encode()).hexdigest()


def _file_list(name: object) -> list[str] | None:
    if not isinstance(name, str) or not re.fullmatch(r"files-[0-9a-f]{64}", name):
        return None
    text = deps.read_memo(deps.memo_file(FOLDER, name))
    try:
        paths = json.loads(text) if text is not None else None
    except ValueError:
        return None
    ok = isinstance(paths, list) and all(isinstance(p, str) for p in paths)
    return paths if ok else None


def recall(memo_key: str | None) -> dict | None:
    """{"ops", "api"} of the remembered load of `memo_key`, while every file it depended on is
    as it was; None otherwise (a memo without the API, from an older kbuild, included)."""
    if memo_key is None:
        return None
    text = deps.read_memo(deps.memo_file(FOLDER, memo_key))
    try:
        memo = json.loads(text) if text is not None else None
        ops, api, files, state = memo["ops"], memo["api"], memo["files"], memo["state"]
    except (ValueError, KeyError, TypeError):
        return None
    paths = _file_list(files)
    if paths is None or file_state(paths) != state:
        return None
    if not isinstance(ops, list) or not all(isinstance(o, str) for o in ops):
        return None
    if not isinstance(api, dict):
        return None
    return {"ops": ops, "api": api}


def remember(memo_key: str | None, before: list, variant: Path, ops: list[str],
             files: list[str], api: dict | None = None) -> bool:
    """Writes the memo of a successful load, unless the folder changed since `before` (its
    snapshot when the key was made); whether it was written."""
    if memo_key is None or snapshot(variant) != before:
        return False
    paths = sorted(set(files))
    listing = json.dumps(paths)
    name = "files-" + hashlib.sha256(listing.encode()).hexdigest()
    if _file_list(name) != paths:
        deps.write_memo(deps.memo_file(FOLDER, name), listing)
    memo = json.dumps({"ops": ops, "api": api or {}, "files": name, "state": file_state(paths)})
    deps.write_memo(deps.memo_file(FOLDER, memo_key), memo)
    return True
