"""Stage: publish — one installable wheel per variant (`kbuild to-wheel`).

`kernels` dropped its `to-wheel` after 0.11.3; this is ours. A variant folder is already a
flat, relatively-importing package, so the wheel just installs it as `<module>/` (the kernel's
module name, e.g. `img2gray`): `import img2gray` runs `_ops.py`, which imports the
`<id>.abi3.so` as `img2gray.<id>`; its static initialisers register `torch.ops.<id>`.

Naming, so that several variants of one kernel can sit in one folder and pip can choose:

    img2gray-1.0.0+torch213cpu-cp39-abi3-manylinux_2_28_x86_64.whl   compiled, Requires-Dist torch==2.13.*
    img2gray-1.0.0+cuda-py3-none-any.whl                              noarch torch-cuda, Requires-Dist torch

The zip is written directly (sorted entries, fixed timestamps, sha256 RECORD), so the same
variant always gives the same bytes.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .. import __version__
from ..stages.check import BYTECODE, check_built
from ..core.built import BuiltVariant, variant_dirs
from ..core.errors import BuildError
from ..core.files import write_atomic
from ..core.layout import BUILD_DIR, MANIFEST, METADATA
from ..core.metadata import VariantMetadata
from ..core.pydeps import pypi_names
from ..core.variant import Variant, VariantError
from .hub import REPO_TYPE, HubClient, check_endpoint
from .refs import check_repo_id

PYTHON_TAG = "cp39"  # abi3 from Python 3.9 (the limited API the extensions are built against)
MANYLINUX = "manylinux_2_28"
ZIP_DATE = (1980, 1, 1, 0, 0, 0)

Log = Callable[[str], None]

@dataclass(frozen=True)
class WheelTags:
    local: str  # local version label, e.g. torch213cpu
    python: str
    abi: str
    platform: str
    torch_requirement: str
    purelib: bool

    @property
    def tag(self) -> str:
        return f"{self.python}-{self.abi}-{self.platform}"


def _platform(cpu: str, os_name: str) -> str:
    if os_name == "linux":
        return f"{MANYLINUX}_{cpu}"
    if os_name == "darwin":
        return f"macosx_11_0_{'arm64' if cpu == 'aarch64' else cpu}"
    return "win_amd64" if cpu == "x86_64" else "win_arm64"


def wheel_tags(variant: str) -> WheelTags:
    """Tags, local label and torch requirement of the variant folder name `variant`."""
    try:
        v = Variant.parse(variant)
    except VariantError as e:
        raise BuildError(f"cannot make a wheel of variant {variant!r}: {e.reason}",
                         hint="expected torch<MAJ><MIN>-cxx11-<compute>-<cpu>-<os>, "
                              "torch-stable-abi<MAJ><MIN>-..., or torch-<backend>") from None
    if v.is_noarch:
        return WheelTags(v.compute, "py3", "none", "any", "torch", True)
    if v.framework == "tvm-ffi":
        raise BuildError(f"cannot make a wheel of variant {variant!r}: not a torch variant name "
                         "(tvm-ffi variants do not depend on torch)",
                         hint="load tvm-ffi kernels with `kernels`")
    mm = f"{v.version[0]}{v.version[1]}"
    platform = _platform(v.cpu, v.os)
    if v.framework == "torch-stable-abi":
        return WheelTags(f"stableabi{mm}{v.compute}", PYTHON_TAG, "abi3", platform,
                         f"torch>={v.release}", False)
    return WheelTags(f"torch{mm}{v.compute}", PYTHON_TAG, "abi3", platform,
                     f"torch=={v.release}.*", False)


def _python_requirements(meta: VariantMetadata, path: Path) -> list[str]:
    """PyPI names of metadata `python-depends` (core/pydeps.py)."""
    return pypi_names(meta.python_depends, meta.backend.type, path)


def _header(meta: VariantMetadata, key: str, path: Path) -> str | None:
    """A metadata.json string as a one-line METADATA header value (None when unset)."""
    value = getattr(meta, key)
    if value and value.splitlines() != [value]:
        raise BuildError(f"`{key}` contains a line break", file=path, key=key,
                         hint="metadata values become one-line wheel headers")
    return value or None


def _record(entries: list[tuple[str, bytes, int]], record_path: str) -> bytes:
    """RECORD as CSV (names with commas, quotes or line breaks quoted, as pip reads them)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerows((arc, _record_hash(data), len(data)) for arc, data, _ in entries)
    writer.writerow((record_path, "", ""))
    return buf.getvalue().encode()


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(built: BuiltVariant, out_dir: Path) -> Path:
    """Writes the wheel of one variant into `out_dir` and returns its path. Only a variant that
    passes `kbuild check` (without loading it) is packaged: a digest that matches every file,
    the layout and the ABI policy."""
    variant, meta = built.path.resolve(), built.metadata
    path = variant / METADATA
    problems = [p for p in check_built(built, load=False).problems if p.code != BYTECODE]
    if problems:
        raise BuildError("; ".join(problems), file=variant, hint="rebuild the variant (`kbuild build`)")
    tags = wheel_tags(variant.name)
    name = meta.name
    module = name.replace("-", "_")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", module):
        raise BuildError(f"kernel name {name!r} is not importable as a package", file=variant / METADATA,
                         key="name")
    version = f"{meta.version}.0.0+{tags.local}"
    dist = re.sub(r"[-_.]+", "_", name).lower()
    dist_info = f"{dist}-{version}.dist-info"
    compiled = any(p.suffix == ".so" or p.name.endswith(".pyd") for p in variant.iterdir())
    if compiled and tags.purelib:
        raise BuildError(f"noarch variant {variant.name} contains a compiled extension", file=variant)

    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
             f"Summary: The {name} kernel ({variant.name}), packaged by pixi-kernel-builder"]
    if _header(meta, "license", path):
        lines.append(f"License: {meta.license}")
    for key, label in (("upstream", "Source"), ("source", "Source")):
        if _header(meta, key, path):
            lines.append(f"Project-URL: {label}, {getattr(meta, key)}")
    lines.append("Requires-Python: >=3.9")
    requirements = [tags.torch_requirement, *_python_requirements(meta, path)]
    lines += [f"Requires-Dist: {r}" for r in requirements]
    metadata_text = "\n".join(lines) + "\n"
    wheel_text = (f"Wheel-Version: 1.0\nGenerator: pixi-kernel-builder ({__version__})\n"
                  f"Root-Is-Purelib: {'true' if tags.purelib else 'false'}\nTag: {tags.tag}\n")

    entries: list[tuple[str, bytes, int]] = []
    for path in built.files():
        rel = path.relative_to(built.path).as_posix()
        mode = 0o755 if path.suffix in (".so", ".pyd", ".dylib") else 0o644  # not the cache's modes
        entries.append((f"{module}/{rel}", path.read_bytes(), mode))
    entries.append((f"{dist_info}/METADATA", metadata_text.encode(), 0o644))
    entries.append((f"{dist_info}/WHEEL", wheel_text.encode(), 0o644))
    entries.append((f"{dist_info}/RECORD", _record(entries, f"{dist_info}/RECORD"), 0o644))

    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{dist}-{version}-{tags.tag}.whl"
    archive = io.BytesIO()  # the files are in memory already: the wheel is written in one go
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for arc, data, mode in entries:
            info = zipfile.ZipInfo(arc, date_time=ZIP_DATE)
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    write_atomic(target, archive.getvalue())
    return target


def kernel_depends_note(built: BuiltVariant) -> str | None:
    deps = built.metadata.kernel_depends
    if not deps:
        return None
    names = ", ".join(str(d.get("repo-id", d)) for d in deps)
    return (f"{built.name}: kernel-depends ({names}) cannot be expressed as wheel requirements; "
            "load those kernels with `kernels`")


# ----------------------------------------------------------------------------- to-wheel


def download_build(repo_id: str, version: int, *, endpoint: str | None = None,
                   token: str | None = None, cache_dir: Path | None = None) -> Path:
    """snapshot_download of `build/*` at branch v<version>; returns the local build folder."""
    check_repo_id(repo_id)
    hub = HubClient(repo_id, endpoint=endpoint, token=token, log=lambda _: None, retries=2, backoff=0.5)
    from huggingface_hub.errors import RevisionNotFoundError

    def fetch() -> str:
        from huggingface_hub.utils import (are_progress_bars_disabled, disable_progress_bars,
                                           enable_progress_bars)
        was_disabled = are_progress_bars_disabled()
        disable_progress_bars()
        try:
            return hub.api.snapshot_download(repo_id, repo_type=REPO_TYPE, revision=f"v{version}",
                                             allow_patterns=["build/*"], cache_dir=cache_dir)
        except RevisionNotFoundError:
            raise BuildError(f"{repo_id} has no version {version} (branch v{version})",
                             hint=f"list the versions with `kernels versions {repo_id}`") from None
        finally:
            if not was_disabled:
                enable_progress_bars()
    root = Path(hub.call(f"downloading {repo_id}@v{version}", fetch)) / "build"
    if not root.is_dir():
        raise BuildError(f"{repo_id}@v{version} has no build/ folder")
    return root


def to_wheels(source: Path | None, *, out: Path, repo_id: str | None = None,
              version: int | None = None, endpoint: str | None = None,
              log: Log = print, warn: Log = print) -> list[Path]:
    check_endpoint(endpoint)  # before `check` imports kernels, which imports huggingface_hub
    if repo_id is not None:
        if version is None:
            raise BuildError("--repo-id needs --version", hint="e.g. --version 1 for branch v1")
        build_root = download_build(repo_id, version, endpoint=endpoint)
        variants = variant_dirs(build_root)
    else:
        if version is not None:
            raise BuildError("--version only applies with --repo-id")
        source = (source or Path(".")).resolve()
        if (source / METADATA).is_file():
            variants = [source]
        else:
            build_root = source / BUILD_DIR if (source / MANIFEST).is_file() else source
            if not build_root.is_dir():
                raise BuildError("no build folder", file=build_root, hint="run `kbuild build` first")
            variants = variant_dirs(build_root)
    if not variants:
        raise BuildError("no variants to package", hint="run `kbuild build` first")
    wheels = []
    failures: list[BuildError] = []
    for v in variants:
        try:
            built = BuiltVariant.load(v)
            path = build_wheel(built, out)
        except BuildError as e:  # a broken variant is reported, the others still packaged
            failures.append(e)
            warn(f"skipping {v.name}: {e}")
            continue
        note = kernel_depends_note(built)
        if note:
            warn(note)
        log(f"{v.name} -> {path}")
        wheels.append(path)
    if not wheels:
        raise failures[0]
    return wheels
