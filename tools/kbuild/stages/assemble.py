"""Built products → a complete variant folder, moved into `build/` atomically."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from .. import __version__
from ..core.built import BuiltVariant, digest_files
from ..core.errors import BuildError
from ..core.gitinfo import git_state
from ..core.envstamp import environment_provenance
from ..core.layout import METADATA
from ..core.signature import drop_unless_current
from ..core.metadata import (BackendInfo, BuilderGit, Dependency, Digest, Environment, KernelGit,
                             LocalBuild, Provenance, SplitCompile, VariantMetadata)
from .generate import cutlass
from .plan import VariantPlan


def provenance(plan: VariantPlan, nvcc_split: int = 1) -> Provenance:
    """Where the variant comes from; `nvcc_split`: the parts nvcc split its device code into."""
    tools_git = git_state(Path(__file__).resolve().parent)
    builder = (BuilderGit(version=__version__, commit=tools_git.commit, dirty=tools_git.dirty)
               if tools_git else BuilderGit(version=__version__))
    env = environment_provenance(plan.torch.python if plan.torch else None,
                                 plan.cuda.root if plan.cuda else None)
    used = cutlass.provenance(plan) if plan.compiled else []
    return Provenance(
        kernel_builder=builder,
        **({"kernel": KernelGit(commit=plan.git.commit, dirty=plan.git.dirty)} if plan.git else {}),
        # a matrix environment: its name and the hashes of the locks it was realised from
        **({"environment": Environment.model_validate(env)} if env else {}),
        # the header trees compiled in, and any substitution (--cutlass-substitute)
        **({"dependencies": [Dependency.model_validate({k: v for k, v in d.items() if v is not None})
                             for d in used]} if used else {}),
        # --cuda-capabilities: never published (check refuses it)
        **({"local_build": LocalBuild(cuda_capabilities=list(plan.local_capabilities))}
           if plan.local_capabilities else {}),
        # KBUILD_NVCC_SPLIT (or a local build's default): kernels may run slower; never published
        **({"split_compile": SplitCompile(parts=nvcc_split)} if nvcc_split > 1 else {}))


def metadata(plan: VariantPlan, variant: Path, nvcc_split: int = 1) -> VariantMetadata:
    """The metadata of the variant staged at `variant` (its files are digested)."""
    general = plan.manifest.general
    backend = BackendInfo(type=plan.backend, **(
        {"archs": plan.archs} if plan.backend.needs.archs_key and plan.archs else {}))
    sources = {k: getattr(general, k) for k in ("upstream", "source") if getattr(general, k)}
    return VariantMetadata(
        name=general.name, id=plan.kernel_id, version=general.version, license=general.license,
        python_depends=general.python_depends_for(plan.backend),
        kernel_depends=[d.model_dump(by_alias=True, exclude_none=True)
                        for d in general.kernel_depends_for(plan.backend)],
        backend=backend, **sources,
        digest=Digest(algorithm="sha256", files=digest_files(variant)),
        provenance=provenance(plan, nvcc_split))


def _ships(rel: str, data_exts: set[str]) -> bool:
    """`.py` always; other files only when `pyext` lists their extension (as upstream)."""
    name = rel.rsplit("/", 1)[-1]
    return name.endswith(".py") or any(name.endswith("." + e) for e in data_exts)


def python_files(plan: VariantPlan) -> list[tuple[Path, str]]:
    """(source, relative destination) of the package files shipped from torch-ext/<module>/:
    Python files and the data extensions `pyext` names. A symlink (file or folder) that leads
    out of the project is refused."""
    project = plan.project.resolve()
    src = project / "torch-ext" / plan.module_name
    cfg = plan.manifest.torch or plan.manifest.torch_noarch or getattr(plan.manifest, "tvm_ffi", None)
    pyext = getattr(cfg, "pyext", None) or ["py", "pyi"]
    data_exts = {e.lstrip(".") for e in pyext} - {"py"}
    out = []
    seen_dirs: set[Path] = set()
    for dirpath, dirnames, filenames in os.walk(src, followlinks=True):
        here = Path(dirpath)
        real = here.resolve()
        if not real.is_relative_to(project):
            _outside(project, here, real)
        if real in seen_dirs:  # a symlink loop
            dirnames[:] = []
            continue
        seen_dirs.add(real)
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            path = here / name
            rel = path.relative_to(src).as_posix()
            if rel == "_ops.py" or name.endswith(".pyc") or not _ships(rel, data_exts):
                continue  # _ops.py: always the generated one
            target = path.resolve()
            if not target.is_relative_to(project):
                _outside(project, path, target)
            if target.is_file():
                out.append((path, rel))
    return sorted(out, key=lambda item: item[1])


def _outside(project: Path, link: Path, target: Path) -> None:
    raise BuildError(f"{link.relative_to(project)} is a symlink to {target}, outside the project",
                     file=link, hint="replace the link with the file itself (a kernel ships only "
                                     "files of its project)")


def _copy(src: Path, dest: Path) -> None:
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise BuildError("disk full: no space left to write this file", file=dest,
                             hint="free space on that file system and build again") from None
        raise BuildError(f"cannot write this file: {e.strerror or e}", file=dest,
                         hint="check the permissions and free space of the build folder") from None


def stage(plan: VariantPlan, work: Path, so: Path | None, staging_root: Path,
          nvcc_split: int = 1) -> Path:
    """Builds the complete variant in a private staging dir and returns it; on any failure
    the staging dir is removed. `nvcc_split`: the split the `.so`'s device code was compiled
    with (recorded in the metadata's provenance when more than 1)."""
    staging_root.mkdir(parents=True, exist_ok=True)
    staging = staging_root / f"{plan.name}.{os.getpid()}"
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir()
    try:
        for src, rel in python_files(plan):
            _copy(src, staging / rel)
        _copy(work / "_ops.py", staging / "_ops.py")
        if so is not None:
            _copy(so, staging / so.name)
            os.chmod(staging / so.name, 0o755)
        meta = metadata(plan, staging, nvcc_split)
        try:
            BuiltVariant.write(staging, meta)
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise BuildError("disk full: no space left to write this file",
                                 file=staging / METADATA,
                                 hint="free space on that file system and build again") from None
            raise
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return staging


def same_content(a: Path, b: Path) -> bool:
    (built_a, _), (built_b, _) = BuiltVariant.read(a), BuiltVariant.read(b)
    if built_a is None or built_b is None:
        return False
    return built_a.metadata == built_b.metadata and built_a.digest() == built_b.digest()


def install(staging: Path, build_dir: Path, name: str) -> bool:
    """Moves `staging` to `build_dir/name` atomically; returns False when it was already there.
    A replaced folder takes its signature with it; a kept one keeps its signature only while it
    signs the metadata.json there (never a stale one left behind)."""
    build_dir.mkdir(parents=True, exist_ok=True)
    target = build_dir / name  # a whole folder renamed into place, not core/files.write_atomic's one file
    if target.exists() and same_content(staging, target):
        shutil.rmtree(staging)
        drop_unless_current(target)
        return False
    if target.exists():
        trash = staging.with_name(staging.name + ".old")
        os.rename(target, trash)
        os.rename(staging, target)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.rename(staging, target)
    return True
