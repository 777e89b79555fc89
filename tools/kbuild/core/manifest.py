"""Stage 1: `build.toml` → one typed, validated `Manifest`."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from . import editions
from .errors import BuildError
from .layout import MANIFEST

NAME_RE = re.compile(r"^[a-z][-a-z0-9]*[a-z0-9]$")
CAPABILITY_RE = re.compile(r"^\d+\.\d+[af]?(\+PTX)?$")
BACKENDS = ("cpu", "cuda", "rocm", "metal", "xpu", "cann", "neuron", "tpu")
KERNEL_DEPENDS = ("torch", "cutlass_3_6", "cutlass_3_8", "cutlass_3_9", "cutlass_4_0",
                  "cutlass_4_1", "cutlass_4_2", "cutlass_4_3", "cutlass_4_4", "cutlass_4_5",
                  "sycl_tla", "metal-cpp")
PYTHON_DEPENDS = {"*": {"einops", "helion", "tvm-ffi"}, "cuda": {"nvidia-cutlass-dsl"},
                  "xpu": {"onednn"}, "neuron": {"nki"}}
Backend = Literal["cpu", "cuda", "rocm", "metal", "xpu", "cann", "neuron", "tpu"]


def _kebab(name: str) -> str:
    return name.replace("_", "-")


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=_kebab, populate_by_name=True,
                              frozen=True)


class KernelDependency(Model):
    repo_id: str
    version: int | None = None
    revision: str | None = None

    @model_validator(mode="after")
    def _one_of(self) -> "KernelDependency":
        if (self.version is None) == (self.revision is None):
            raise ValueError("give exactly one of `version` or `revision`")
        return self


class Hub(Model):
    repo_id: str | None = None
    branch: str | None = None

    @field_validator("repo_id")
    @classmethod
    def _repo_id(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[\w.-]+/[\w.-]+", v):
            raise ValueError(f"expected `org/name`, got {v!r}")
        return v


class CudaGeneral(Model):
    minver: str | None = None
    maxver: str | None = None
    python_depends: list[str] = []
    kernel_depends: list[KernelDependency] = []


class General(Model):
    name: str
    version: int = Field(ge=0)
    edition: int = editions.CURRENT_EDITION
    license: str
    backends: list[Backend] = Field(min_length=1)
    upstream: str | None = None
    source: str | None = None
    python_depends: list[str] = []
    kernel_depends: list[KernelDependency] = []
    hub: Hub = Hub()
    cuda: CudaGeneral = CudaGeneral()

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.match(v):
            raise ValueError(f"{v!r} must match {NAME_RE.pattern} (lowercase, digits, dashes)")
        return v

    @field_validator("backends")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError("backends are listed more than once")
        return v

    @property
    def module_name(self) -> str:
        return self.name.replace("-", "_")


class Torch(Model):
    src: list[str] = Field(min_length=1)
    include: list[str] = []
    pyext: list[str] = ["py", "pyi"]
    minver: str | None = None
    maxver: str | None = None
    cxx_flags: list[str] = []
    stable_abi: str | dict[str, str] | None = None


class TorchNoarch(Model):
    model_config = ConfigDict(extra="forbid", alias_generator=_kebab, populate_by_name=True,
                              frozen=True)
    pyext: list[str] = ["py", "pyi"]
    cuda_capabilities: list[str] | None = None
    rocm_archs: list[str] | None = None

    @model_validator(mode="before")
    @classmethod
    def _underscore_spellings(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = {k.replace("_", "-"): v for k, v in data.items()}
        return data


class Kernel(Model):
    backend: Backend
    depends: list[str]
    src: list[str] = Field(min_length=1)
    include: list[str] = []
    cxx_flags: list[str] = []
    cuda_capabilities: list[str] | None = None
    cuda_flags: list[str] = []
    cuda_minver: str | None = None
    rocm_archs: list[str] | None = None
    hip_flags: list[str] = []
    sycl_flags: list[str] = []

    @field_validator("depends")
    @classmethod
    def _depends(cls, v: list[str]) -> list[str]:
        unknown = [d for d in v if d not in KERNEL_DEPENDS]
        if unknown:
            raise ValueError(f"unknown dependencies {unknown}; known: {', '.join(KERNEL_DEPENDS)}")
        return v

    @field_validator("cuda_capabilities")
    @classmethod
    def _caps(cls, v: list[str] | None) -> list[str] | None:
        bad = [c for c in v or [] if not CAPABILITY_RE.match(c)]
        if bad:
            raise ValueError(f"invalid CUDA capabilities {bad}; write them like \"9.0\", "
                             "\"9.0a\", \"10.0f\" or \"8.0+PTX\"")
        return v


class Manifest(Model):
    general: General
    torch: Torch | None = None
    torch_noarch: TorchNoarch | None = None
    tvm_ffi: dict[str, Any] | None = None
    kernel: dict[str, Kernel] = {}

    @model_validator(mode="after")
    def _consistent(self) -> "Manifest":
        frameworks = [t for t in ("torch", "torch_noarch", "tvm_ffi") if getattr(self, t) is not None]
        if len(frameworks) != 1:
            raise ValueError("exactly one of [torch], [torch-noarch] or [tvm-ffi] is required, "
                             f"found {len(frameworks)}")
        for name, kernel in self.kernel.items():
            if kernel.backend not in self.general.backends:
                raise ValueError(f"kernel.{name}: backend {kernel.backend!r} is not in "
                                 f"general.backends {self.general.backends}")
        return self

    @property
    def is_noarch(self) -> bool:
        return self.torch_noarch is not None

    def kernels_for(self, backend: str) -> dict[str, Kernel]:
        """Kernels linked into a variant: its backend's kernels, plus CPU kernels on every host."""
        return {n: k for n, k in self.kernel.items() if k.backend in (backend, "cpu")}


def read_raw(project: Path) -> dict[str, Any]:
    path = project / MANIFEST
    if not path.is_file():
        raise BuildError("no build.toml found", file=path,
                         hint="run the command in a kernel project or pass its directory")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise BuildError(f"malformed TOML: {e}", file=path, hint="fix the TOML syntax") from None
    except UnicodeDecodeError:
        raise BuildError("not UTF-8 text", file=path) from None


def _loc(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc if not str(p).startswith("function-"))


def load(project: Path, *, warn=None) -> Manifest:
    """Parses, upgrades and validates `project/build.toml`, including every source path."""
    project = project.resolve()
    path = project / MANIFEST
    raw = read_raw(project)
    edition = editions.detect_edition(raw)
    if isinstance(edition, int) and edition > editions.CURRENT_EDITION:
        raise BuildError(f"edition {edition} is newer than this builder supports "
                         f"({editions.CURRENT_EDITION})", file=path, key="general.edition",
                         hint="upgrade pixi-kernel-builder")
    upgraded, notes = editions.upgrade(raw)
    if notes and warn:
        warn(f"{path}: edition {edition} manifest upgraded in memory ({'; '.join(notes)}); "
             "run `kbuild update-build` to rewrite it")
    try:
        manifest = Manifest.model_validate(upgraded)
    except ValidationError as e:
        err = e.errors()[0]
        key = _loc(err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg, hint = "unknown key", "remove it or check its spelling against the edition 5 format"
        elif err["type"] == "missing":
            msg, hint = "required key is missing", "add it"
        else:
            hint = "fix the value"
        raise BuildError(msg, file=path, key=key or None, hint=hint) from None
    _check_python_depends(manifest, path)
    _check_paths(manifest, project, path)
    return manifest


def _check_python_depends(manifest: Manifest, path: Path) -> None:
    allowed = set(PYTHON_DEPENDS["*"])
    for backend in manifest.general.backends:
        allowed |= PYTHON_DEPENDS.get(backend, set())
    for key, deps in (("general.python-depends", manifest.general.python_depends),
                      ("general.cuda.python-depends", manifest.general.cuda.python_depends)):
        for dep in deps:
            if dep not in allowed:
                raise BuildError(f"{dep!r} is not an allowed Python dependency", file=path,
                                 key=key, hint=f"allowed: {', '.join(sorted(allowed))}")


def resolve_source(project: Path, rel: str, *, manifest_path: Path, key: str,
                   kind: str = "file") -> Path:
    """Resolves a manifest path, refusing ones that escape the project (`..`, absolute, symlinks)."""
    if os.path.isabs(rel) or rel.startswith("~"):
        raise BuildError(f"{rel!r} is an absolute path", file=manifest_path, key=key,
                         hint="use a path relative to the project directory")
    target = (project / rel).resolve()
    if not target.is_relative_to(project):
        raise BuildError(f"{rel!r} points outside the project", file=manifest_path, key=key,
                         hint="keep sources inside the project directory (no `..` or symlinks out)")
    exists = target.is_file() if kind == "file" else target.is_dir()
    if not exists:
        raise BuildError(f"{kind} {rel!r} does not exist", file=manifest_path, key=key,
                         hint=f"create it or fix the path in {MANIFEST}")
    return target


def _check_paths(manifest: Manifest, project: Path, path: Path) -> None:
    groups: list[tuple[str, list[str], str]] = []
    if manifest.torch:
        groups += [("torch.src", manifest.torch.src, "file"),
                   ("torch.include", manifest.torch.include, "dir")]
    for name, kernel in manifest.kernel.items():
        groups += [(f"kernel.{name}.src", kernel.src, "file"),
                   (f"kernel.{name}.include", kernel.include, "dir")]
    owner: dict[Path, str] = {}
    for key, paths, kind in groups:
        for rel in paths:
            resolved = resolve_source(project, rel, manifest_path=path, key=key, kind=kind)
            if kind != "file":
                continue
            shared_header = resolved.suffix in (".h", ".hpp", ".cuh")
            if resolved in owner and (owner[resolved] == key or not shared_header):
                raise BuildError(f"{rel!r} is listed twice (also in `{owner[resolved]}`)",
                                 file=path, key=key, hint="list each source file once")
            owner.setdefault(resolved, key)
    module_dir = project / "torch-ext" / manifest.general.module_name
    if not (module_dir / "__init__.py").is_file():
        raise BuildError(f"missing Python package {module_dir.relative_to(project)}/__init__.py",
                         file=path, key="general.name",
                         hint="the package under torch-ext/ must be named after general.name "
                              "with '-' turned into '_'")
