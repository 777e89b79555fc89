"""The typed model of `build.toml` (edition 5, the whole schema upstream's kernel-builder knows).

Every field has a `description` (what it means, its default): the build.toml reference in the
docs is generated from this model. Keys are kebab-case in TOML (`cuda-capabilities`), except
in `[torch-noarch]`, which also takes upstream's snake_case spellings.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, PlainValidator, field_validator,
                      model_validator)
from pydantic_core import PydanticCustomError

from ..backend import KERNEL_BACKENDS, Backend
from . import forms
from .forms import (Capability, Dependency, Flag, GitRef, GitUrl, Int, License, Path,
                    ProjectName, PyExt, RepoId, RocmArch, Str, Version2, Version3)

# A backend name, validated as one of the closed set and kept as its `Backend`.
def _backend(name: str) -> Backend:
    """A plain function: pydantic cannot read Enum's call signature on Python 3.12+."""
    return Backend(name)


BackendName = Annotated[Literal[tuple(Backend.names())], AfterValidator(_backend)]
KernelBackend = Annotated[Literal[tuple(Backend.names(KERNEL_BACKENDS))], AfterValidator(_backend)]
DEFAULT_PYEXT = ["py", "pyi"]


def fail(message: str, *, key: str | None = None, subkey: str | None = None,
         hint: str | None = None) -> PydanticCustomError:
    """A validation error with a message of ours; `key` replaces the error's location,
    `subkey` is appended to it, `hint` says what to do."""
    return PydanticCustomError("manifest", "{message}", {"message": message, "key": key,
                                                         "subkey": subkey, "hint": hint})


def _kebab(name: str) -> str:
    return name.replace("_", "-")


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=_kebab, strict=True, frozen=True)


def _python_depends(table: str):
    allowed = forms.PYTHON_DEPENDS[table]

    def check(deps: list[str]) -> list[str]:
        for dep in deps:
            if dep in allowed:
                continue
            home = [t for t, names in forms.PYTHON_DEPENDS.items() if dep in names]
            where = (f"; it belongs in [general{'' if home[0] == 'general' else '.' + home[0]}]"
                     if home else "")
            raise fail(f"{dep!r} is not an allowed Python dependency here (allowed: "
                       f"{', '.join(allowed) or 'none'}){where}",
                       hint="use only the allowed names (upstream refuses others too)")
        return deps
    return check


GeneralDeps = Annotated[list[Str], AfterValidator(_python_depends("general"))]
CudaDeps = Annotated[list[Str], AfterValidator(_python_depends("cuda"))]
XpuDeps = Annotated[list[Str], AfterValidator(_python_depends("xpu"))]
NeuronDeps = Annotated[list[Str], AfterValidator(_python_depends("neuron"))]
TpuDeps = Annotated[list[Str], AfterValidator(_python_depends("tpu"))]


def _python_depends_field(table: str, where: str):
    return Field([], description=f"Python packages the kernel needs {where}, from the list "
                                 "upstream allows (" + (", ".join(forms.PYTHON_DEPENDS[table])
                                                        or "none") + "). Default: none.")


class KernelDependency(Model):
    """Another Hub kernel this kernel loads (`kernels` resolves it at load time)."""

    repo_id: RepoId = Field(description="Hub repo id of the kernel depended on, `org/name`.")
    version: Int | None = Field(None, description="Its major version (a `v<version>` branch). "
                                                  "Give exactly one of `version` or `revision`.")
    revision: GitRef | None = Field(None, description="A branch, tag or commit of it instead of a "
                                                      "version.")

    @model_validator(mode="after")
    def _one_of(self) -> "KernelDependency":
        if (self.version is None) == (self.revision is None):
            raise fail("give exactly one of `version` or `revision`")
        return self


KernelDepends = Field([], description="Hub kernels this kernel depends on, as "
                                      "`{ repo-id = \"org/name\", version = 1 }` tables. Default: none.")


class Hub(Model):
    repo_id: RepoId | None = Field(None, description="Hub repo that `kbuild upload` publishes to, "
                                                     "`org/name`. Default: none (pass --repo-id).")
    branch: GitRef | None = Field(None, description="Branch to upload to. Default: "
                                                    "`v<general.version>`.")


class CudaGeneral(Model):
    minver: Version2 | None = Field(None, description="Oldest CUDA toolkit (major.minor, inclusive) "
                                                      "the project builds with. Default: no bound.")
    maxver: Version2 | None = Field(None, description="Newest CUDA toolkit (major.minor, inclusive) "
                                                      "the project builds with. Default: no bound.")
    python_depends: CudaDeps = _python_depends_field("cuda", "in CUDA variants")
    kernel_depends: list[KernelDependency] = KernelDepends


class XpuGeneral(Model):
    python_depends: XpuDeps = _python_depends_field("xpu", "in XPU variants")
    kernel_depends: list[KernelDependency] = KernelDepends


class NeuronGeneral(Model):
    python_depends: NeuronDeps = _python_depends_field("neuron", "in Neuron variants")
    kernel_depends: list[KernelDependency] = KernelDepends


class TpuGeneral(Model):
    python_depends: TpuDeps = _python_depends_field("tpu", "in TPU variants")


class General(Model):
    name: ProjectName = Field(description="Kernel name: lowercase letters, digits and `-`, "
                                          "starting with a letter. The Python package is "
                                          "`torch-ext/<name with - as _>/`. Required.")
    version: Int = Field(description="Major version of the kernel's API; uploads go to branch "
                                     "`v<version>`. Required (older editions: 1).")
    edition: Literal[5] = Field(5, description="build.toml format edition; 5. Files without it are "
                                               "older editions, upgraded in memory.")
    license: License = Field(description="License identifier as the Hub spells it (e.g. "
                                         "\"apache-2.0\"). Required.")
    backends: list[BackendName] = Field(min_length=1, description="Backends the kernel supports: "
                                        + ", ".join(Backend.names()) + ". Required. This "
                                        "builder compiles cpu and cuda; noarch projects build any.")
    upstream: GitUrl | None = Field(None, description="Git URL of the original kernel code, "
                                                      "recorded in metadata.json. Default: none.")
    source: GitUrl | None = Field(None, description="Git URL of this kernel project, recorded in "
                                                    "metadata.json. Default: none.")
    minver: Version3 | None = Field(None, description="Upstream's `general.minver` (a version, "
                                                      "major.minor.patch); accepted for "
                                                      "compatibility, not used here. Default: none.")
    python_depends: GeneralDeps = _python_depends_field("general", "in every variant")
    kernel_depends: list[KernelDependency] = KernelDepends
    hub: Hub = Field(Hub(), description="[general.hub]: where `kbuild upload` publishes.")
    cuda: CudaGeneral = Field(CudaGeneral(), description="[general.cuda]: CUDA toolkit bounds and "
                                                         "CUDA-only dependencies.")
    xpu: XpuGeneral = Field(XpuGeneral(), description="[general.xpu]: XPU-only dependencies.")
    neuron: NeuronGeneral = Field(NeuronGeneral(), description="[general.neuron]: Neuron-only "
                                                               "dependencies.")
    tpu: TpuGeneral = Field(TpuGeneral(), description="[general.tpu]: TPU-only dependencies.")

    @field_validator("backends")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise fail("backends are listed more than once")
        return v

    @property
    def module_name(self) -> str:
        return self.name.replace("-", "_")

    def python_depends_for(self, backend: Backend) -> list[str]:
        """General Python dependencies plus those of `backend`'s table."""
        table = getattr(self, backend, None)
        return list(self.python_depends) + list(getattr(table, "python_depends", []))

    def kernel_depends_for(self, backend: Backend) -> list[KernelDependency]:
        """General kernel dependencies plus those of `backend`'s table."""
        table = getattr(self, backend, None)
        return list(self.kernel_depends) + list(getattr(table, "kernel_depends", []))


def _stable_abi(value: Any) -> str | dict[str, str]:
    check = forms.version_form(2)
    if isinstance(value, str):
        try:
            return check(value)
        except ValueError as e:
            raise fail(str(e)) from None
    if isinstance(value, dict):
        out = {}
        for backend, version in value.items():
            if backend not in forms.BACKENDS:
                raise fail(f"unknown backend {backend!r}; known: {', '.join(forms.BACKENDS)}",
                           subkey=str(backend))
            if not isinstance(version, str):
                raise fail("expected a version string like \"2.9\"", subkey=backend)
            try:
                out[backend] = check(version)
            except ValueError as e:
                raise fail(str(e), subkey=backend) from None
        return out
    raise fail("expected a torch version like \"2.9\", or a table of them by backend")


StableAbi = Annotated[Any, PlainValidator(_stable_abi, json_schema_input_type=str | dict[str, str])]

SRC_DESC = "Source files and headers, relative to the project. Required."
INCLUDE_DESC = "Include directories, relative to the project. Default: none."
PYEXT_DESC = ("Extensions of the files under torch-ext/<module>/ that ship in the variant. "
              "Default: [\"py\", \"pyi\"].")


class Torch(Model):
    src: list[Path] = Field(min_length=1, description="The torch binding's sources and headers "
                                                      "(e.g. torch-ext/torch_binding.cpp). Required.")
    include: list[Path] = Field([], description=INCLUDE_DESC)
    pyext: list[PyExt] = Field(DEFAULT_PYEXT, description=PYEXT_DESC)
    minver: Version2 | None = Field(None, description="Oldest torch (major.minor, inclusive) to "
                                                      "build for. Default: no bound.")
    maxver: Version2 | None = Field(None, description="Newest torch (major.minor, inclusive) to "
                                                      "build for. Default: no bound.")
    cxx_flags: list[Flag] = Field([], description="Extra C++ compiler flags for the binding "
                                                  "sources. Default: none.")
    stable_abi: StableAbi | None = Field(None, description="Build against torch's stable ABI: "
                                         "the oldest torch version to target (\"2.9\"), or a "
                                         "table of them by backend. Default: the regular ABI.")


class TorchNoarch(Model):
    pyext: list[PyExt] = Field(DEFAULT_PYEXT, description=PYEXT_DESC)
    cuda_capabilities: list[Capability] | None = Field(None, description="CUDA capabilities "
                                                       "written to metadata.json of the cuda "
                                                       "variant. Default: none.")
    rocm_archs: list[RocmArch] | None = Field(None, description="ROCm architectures written to "
                                              "metadata.json of the rocm variant. Default: none.")

    @model_validator(mode="before")
    @classmethod
    def _underscore_spellings(cls, data: Any) -> Any:
        """Upstream spells these keys with underscores; both spellings are accepted."""
        if not isinstance(data, dict):
            return data
        out: dict = {}
        for key, value in data.items():
            new = key.replace("_", "-") if isinstance(key, str) else key
            if new in out:
                raise fail(f"`{key}` is given twice (as `{new}` too)", subkey=str(key))
            out[new] = value
        return out


class TvmFfi(Model):
    src: list[Path] = Field(min_length=1, description="The tvm-ffi binding's sources and headers. "
                                                      "Required.")
    include: list[Path] = Field([], description=INCLUDE_DESC)
    pyext: list[PyExt] = Field(DEFAULT_PYEXT, description=PYEXT_DESC)
    cxx_flags: list[Flag] = Field([], description="Extra C++ compiler flags for the binding "
                                                  "sources. Default: none.")


# Keys that only kernels of some backends take (cuda kernels take the ROCm keys for hipify).
_CUDA, _ROCM_OR_CUDA = (Backend.CUDA,), (Backend.ROCM, Backend.CUDA)
BACKEND_KEYS = {"cuda_capabilities": _CUDA, "cuda_flags": _CUDA, "cuda_minver": _CUDA,
                "cuda_maxver": _CUDA, "rocm_archs": _ROCM_OR_CUDA, "hip_flags": _ROCM_OR_CUDA,
                "sycl_flags": (Backend.XPU,)}


class Kernel(Model):
    backend: KernelBackend = Field(description="The kernel's backend: "
                                   + ", ".join(Backend.names(KERNEL_BACKENDS)[:-1]) + " or "
                                   + KERNEL_BACKENDS[-1] + ". Required.")
    depends: list[Dependency] = Field(description="Build dependencies: "
                                      + ", ".join(forms.KERNEL_DEPENDS) + ". Required (may be [])."
                                      " `torch` compiles the kernel with torch's headers.")
    src: list[Path] = Field(min_length=1, description=SRC_DESC)
    include: list[Path] = Field([], description=INCLUDE_DESC)
    cxx_flags: list[Flag] = Field([], description="Extra C++ compiler flags. Default: none.")
    cuda_capabilities: list[Capability] | None = Field(None, description="cuda: capabilities to "
                                                       "compile for (\"9.0\", \"9.0a\", \"10.0f\", "
                                                       "\"8.0+PTX\"), kept where the toolkit "
                                                       "supports them. Default: the toolkit's list.")
    cuda_flags: list[Flag] = Field([], description="cuda: extra nvcc flags. Default: none.")
    cuda_minver: Version2 | None = Field(None, description="cuda: oldest CUDA toolkit (major.minor, "
                                         "inclusive); with older toolkits the kernel is left out "
                                         "of the variant. Default: no bound.")
    cuda_maxver: Version2 | None = Field(None, description="cuda: newest CUDA toolkit (major.minor, "
                                         "inclusive); with newer toolkits the kernel is left out "
                                         "of the variant. Default: no bound. This builder's own: "
                                         "upstream rejects it (warned).")
    rocm_archs: list[RocmArch] | None = Field(None, description="rocm: architectures to compile "
                                              "for (\"gfx942\"). Default: the toolkit's list.")
    hip_flags: list[Flag] = Field([], description="rocm: extra hipcc flags. Default: none.")
    sycl_flags: list[Flag] = Field([], description="xpu: extra SYCL compiler flags. Default: none.")

    @model_validator(mode="after")
    def _backend_keys(self) -> "Kernel":
        for key, backends in BACKEND_KEYS.items():
            if key in self.model_fields_set and self.backend not in backends:
                raise fail(f"`{_kebab(key)}` applies to {' and '.join(backends)} kernels, not to "
                           f"a {self.backend} kernel", subkey=_kebab(key),
                           hint="remove it, or move it to a kernel of that backend")
        return self

    def in_cuda_range(self, version: tuple[int, int]) -> bool:
        """Whether a CUDA toolkit `version` is within cuda-minver..cuda-maxver (inclusive)."""
        def bound(v: str | None) -> tuple[int, ...] | None:
            return tuple(int(p) for p in v.split(".")) if v else None
        lo, hi = bound(self.cuda_minver), bound(self.cuda_maxver)
        return (lo is None or version >= lo) and (hi is None or version <= hi)


FRAMEWORKS = {"torch": "torch", "torch_noarch": "torch-noarch", "tvm_ffi": "tvm-ffi"}


class Manifest(Model):
    general: General = Field(description="[general]: name, version, license, backends. Required.")
    torch: Torch | None = Field(None, description="[torch]: a compiled torch extension. Exactly "
                                                  "one of [torch], [torch-noarch], [tvm-ffi].")
    torch_noarch: TorchNoarch | None = Field(None, description="[torch-noarch]: a pure-Python "
                                             "(e.g. Triton) torch kernel, one variant per backend.")
    tvm_ffi: TvmFfi | None = Field(None, description="[tvm-ffi]: a tvm-ffi extension.")
    kernel: dict[Str, Kernel] = Field({}, description="[kernel.<name>]: the compiled kernels, "
                                      "one section each; names use letters, digits, `_`, `-`.")

    @field_validator("kernel", mode="before")
    @classmethod
    def _kernel_names(cls, value: Any) -> Any:
        if isinstance(value, dict):
            for name in value:
                if isinstance(name, str):
                    try:
                        forms.kernel_section_name(name)
                    except ValueError as e:
                        raise fail(str(e), subkey=name) from None
        return value

    @model_validator(mode="after")
    def _consistent(self) -> "Manifest":
        given = [FRAMEWORKS[f] for f in FRAMEWORKS if getattr(self, f) is not None]
        if len(given) != 1:
            key = given[1] if given else "torch"
            raise fail("exactly one of [torch], [torch-noarch] or [tvm-ffi] is required, found "
                       + (", ".join(f"[{g}]" for g in given) or "none"), key=key,
                       hint="keep the one table that describes the extension")
        for name, kernel in self.kernel.items():
            if self.torch_noarch is not None:
                raise fail("a [torch-noarch] project compiles nothing; kernel sections need "
                           "[torch] or [tvm-ffi]", key=f"kernel.{name}",
                           hint="remove the [kernel.*] sections, or use [torch] instead")
            if kernel.backend not in self.general.backends:
                raise fail(f"backend {kernel.backend!r} is not in general.backends "
                           f"{self.general.backends}", key=f"kernel.{name}.backend",
                           hint=f"add {kernel.backend!r} to general.backends, or remove the kernel")
        return self

    @property
    def framework(self) -> str:
        """`torch`, `torch-noarch` or `tvm-ffi`."""
        return next(FRAMEWORKS[f] for f in FRAMEWORKS if getattr(self, f) is not None)

    @property
    def is_noarch(self) -> bool:
        return self.torch_noarch is not None

    @property
    def is_tvm_ffi(self) -> bool:
        return self.tvm_ffi is not None

    @property
    def binding(self) -> Torch | TvmFfi | None:
        """The compiled binding section ([torch] or [tvm-ffi]); None for noarch."""
        return self.torch or self.tvm_ffi

    def stable_abi_for(self, backend: Backend) -> str | None:
        """The stable-ABI torch version to target for `backend`, or None for the regular ABI."""
        abi = self.torch.stable_abi if self.torch else None
        return abi.get(backend) if isinstance(abi, dict) else abi

    def kernels_for(self, backend: Backend) -> dict[str, Kernel]:
        """Kernels compiled into a variant: its backend's own (as upstream; a CPU kernel is part
        of the `cpu` variant only)."""
        return {n: k for n, k in self.kernel.items() if k.backend == backend}
