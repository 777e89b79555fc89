"""The closed set of backends, and what each one needs, named once.

Every list of backends (the manifest's allowed values, the variant-name grammar, what this
builder compiles, what `kbuild init` scaffolds) and every decision by backend reads this table:
adding a backend is a row here, plus its toolkit finder, templates and checks (see
docs/architecture.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True)
class Needs:
    toolchain: str                 # what compiles its kernels ("c++" for host code)
    compute: str | None            # variant-name prefix of a versioned toolkit (cu130: "cu"); None: the name alone
    kernels: bool                  # `[kernel.*]` sections may name it
    compiled: bool                 # this builder compiles it (a torch variant); else noarch only
    python_depends: tuple[str, ...] | None  # names its `[general.<backend>]` table allows; None: no table
    archs_key: str | None = None   # manifest key of its GPU targets, listed in metadata `backend.archs`
    scaffold: bool = False         # `kbuild init` writes a kernel source for it


class Backend(str, Enum):
    """A backend as written in build.toml, variant names and metadata.json ("cuda", "cpu", …).

    A `str` that compares, hashes, prints (repr too, so messages and lists read as before) and
    serialises as its name."""

    CANN = "cann"
    CPU = "cpu"
    CUDA = "cuda"
    METAL = "metal"
    NEURON = "neuron"
    ROCM = "rocm"
    TPU = "tpu"
    XPU = "xpu"

    __str__ = str.__str__
    __format__ = str.__format__
    __hash__ = str.__hash__

    def __repr__(self) -> str:
        return repr(self.value)

    @property
    def needs(self) -> Needs:
        return NEEDS[self]

    @property
    def compiled(self) -> bool:
        return self.needs.compiled

    @property
    def kernel_define(self) -> str:
        """The preprocessor symbol a variant's sources see (`CUDA_KERNEL`)."""
        return f"{self.value.upper()}_KERNEL"

    @classmethod
    def names(cls, backends=None) -> list[str]:
        return [b.value for b in (cls if backends is None else backends)]


NEEDS: dict[Backend, Needs] = {
    Backend.CANN: Needs("cann", "cann", kernels=False, compiled=False, python_depends=None),
    Backend.CPU: Needs("c++", None, kernels=True, compiled=True, python_depends=None,
                       scaffold=True),
    Backend.CUDA: Needs("nvcc", "cu", kernels=True, compiled=True,
                        python_depends=("nvidia-cutlass-dsl",), archs_key="cuda_capabilities",
                        scaffold=True),
    Backend.METAL: Needs("metal", None, kernels=True, compiled=False, python_depends=None),
    Backend.NEURON: Needs("neuron", None, kernels=False, compiled=False, python_depends=("nki",)),
    Backend.ROCM: Needs("hipcc", "rocm", kernels=True, compiled=False, python_depends=None,
                        archs_key="rocm_archs"),
    Backend.TPU: Needs("tpu", None, kernels=False, compiled=False, python_depends=()),
    Backend.XPU: Needs("sycl", "xpu", kernels=True, compiled=False, python_depends=("onednn",)),
}
# Python dependencies upstream allows in every variant (`[general] python-depends`).
GENERAL_PYTHON_DEPENDS = ("einops", "helion", "tvm-ffi")

KERNEL_BACKENDS = tuple(b for b in Backend if b.needs.kernels)
COMPILED_BACKENDS = tuple(b for b in Backend if b.compiled)
SCAFFOLD_BACKENDS = tuple(b for b in Backend if b.needs.scaffold)
# Upstream gives a universal (pure-Python) kernel of editions 1-2 every backend it had then.
UNIVERSAL_BACKENDS = tuple(b for b in Backend if b != Backend.TPU)
# The legacy noarch variant name `torch-universal` (no backend of its own).
UNIVERSAL = "universal"


def by_compute_prefix() -> dict[str, Backend]:
    """`cu` → CUDA, `rocm` → ROCm, … (backends whose variant names carry a toolkit version)."""
    return {b.needs.compute: b for b in Backend if b.needs.compute}
