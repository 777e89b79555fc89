"""Manifest + environment → the plan of one variant (variant, id, kernels, archs)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import Version

from ..core.backend import COMPILED_BACKENDS, Backend
from ..core.errors import BuildError
from ..core.gitinfo import GitState, build_uid
from ..core.layout import MANIFEST, TORCH_EXT
from ..core.manifest import Kernel, Manifest, inside
from ..core.variant import Variant
from . import frameworks
from .toolchain import CudaToolkit, Toolkit, find_cuda
from .torch_install import TorchInstall

# Default capabilities by toolkit (kernel-builder's lists; 10.3 and 12.1 from CUDA 12.9 on).
DEFAULT_CAPS = [
    (Version("13.0"), ["7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "10.3", "11.0", "12.0",
                       "12.1+PTX"]),
    (Version("12.9"), ["7.0", "7.2", "7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "10.1",
                       "10.3", "12.0", "12.1+PTX"]),
    (Version("12.8"), ["7.0", "7.2", "7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "10.1",
                       "12.0+PTX"]),
    (Version("0"), ["7.0", "7.2", "7.5", "8.0", "8.6", "8.7", "8.9", "9.0+PTX"]),
]


def default_capabilities(cuda: Version) -> list[str]:
    return next(caps for floor, caps in DEFAULT_CAPS if cuda >= floor)


def variant_of(torch: TorchInstall, backend: Backend, cuda: Version | None = None) -> Variant:
    if backend not in COMPILED_BACKENDS:
        raise BuildError(f"backend {backend!r} cannot be compiled here yet",
                         hint=f"supported: {', '.join(COMPILED_BACKENDS)}")
    toolkit = None
    if backend == Backend.CUDA:
        v = cuda or Version(torch.cuda or "0")
        toolkit = (v.major, v.minor)
    release = torch.torch_release
    return Variant.torch((release.major, release.minor), backend, backend_version=toolkit,
                         cxx11=torch.cxx11_abi, cpu=torch.machine, os=torch.system)


@dataclass(frozen=True)
class VariantPlan:
    project: Path
    manifest: Manifest
    variant: Variant
    torch: TorchInstall | None  # the target interpreter's torch (None: noarch)
    uid: str
    git: GitState | None
    kernels: dict[str, Kernel] = field(default_factory=dict)
    cuda: CudaToolkit | None = None
    kernel_archs: dict[str, list[str]] = field(default_factory=dict)
    local_capabilities: tuple[str, ...] | None = None  # a build for this machine's GPU only
    # Kernels of a local build that its capabilities cannot run, compiled only so the binding
    # links: name → the one capability whose PTX alone is emitted (not claimed in metadata).
    link_only: dict[str, str] = field(default_factory=dict)
    capability_notes: tuple[str, ...] = ()  # one line per kernel whose capabilities were cut
    # The sccache-dist scheduler its compiles go to (--dist-scheduler); None: KBUILD_DIST_SCHEDULER,
    # else the user's sccache configuration (stages/compile/dist.py).
    dist_scheduler: str | None = None

    @property
    def name(self) -> str:
        return self.variant.name

    @property
    def backend(self) -> Backend:
        assert self.variant.backend is not None  # only `torch-universal` has none; never planned
        return self.variant.backend

    @property
    def module_name(self) -> str:
        return self.manifest.general.module_name

    @property
    def kernel_id(self) -> str:
        return f"_{self.module_name}_{self.backend}_{self.uid}"

    @property
    def archs(self) -> list[str]:
        """All capabilities of the variant, for metadata (sorted numerically)."""
        caps = {c for archs in self.kernel_archs.values() for c in archs}
        if self.backend != Backend.CUDA:
            return sorted(caps)  # e.g. ROCm gfx names
        return sorted(caps, key=lambda c: (Version(c.split("+")[0].rstrip("af")), c))

    @property
    def compiled(self) -> bool:
        return not self.variant.is_noarch

    @property
    def stable_abi(self) -> tuple[int, int] | None:
        """The torch version a stable-ABI variant targets; None for a regular one."""
        return self.variant.version if self.variant.framework == "torch-stable-abi" else None


def listed_backend(manifest: Manifest, backend: Backend | str, project: Path) -> Backend:
    """`backend` (as the command line names it) when the manifest lists it."""
    if backend not in manifest.general.backends:
        raise BuildError(f"backend {backend!r} is not listed", file=project / MANIFEST,
                         key="general.backends", hint=f"add {backend!r} or build another backend")
    return Backend(backend)


def input_files(project: Path, manifest: Manifest) -> list[Path]:
    """The files a build reads (they make up its uid), each a file of the project."""
    files = [project / MANIFEST]
    if manifest.binding:
        files += [project / s for s in manifest.binding.src]
    for kernel in manifest.kernel.values():
        files += [project / s for s in kernel.src]
    ext = project / TORCH_EXT
    files += [p for p in ext.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    for f in files:
        if not inside(project, f):
            raise BuildError(f"{f.relative_to(project).as_posix()} is a link to a file outside "
                             "the project", file=project / MANIFEST,
                             hint="replace the link with the file, or remove it")
    return [f.resolve() for f in files]


def major_minor(version: str) -> tuple[int, int]:
    major, minor = (int(p) for p in version.split(".")[:2])
    return major, minor


def _check_bounds(value: Version, lo: str | None, hi: str | None, *, what: str, key: str,
                  project: Path) -> None:
    """Upstream's bounds: major.minor, both inclusive (maxver 2.10 admits 2.10.3)."""
    have = (value.major, value.minor)
    if lo and have < major_minor(lo):
        raise BuildError(f"{what} {value} is older than minver {lo}", file=project / MANIFEST,
                         key=f"{key}.minver", hint="use a newer environment or lower minver")
    if hi and have > major_minor(hi):
        raise BuildError(f"{what} {value} is newer than maxver {hi}", file=project / MANIFEST,
                         key=f"{key}.maxver", hint="use an older environment or raise maxver")


def _check_buildable(manifest: Manifest, backend: Backend, project: Path) -> None:
    """Refuses, naming the key, what this builder cannot compile (yet)."""
    path = project / MANIFEST
    if backend not in COMPILED_BACKENDS:
        raise BuildError(f"backend {backend!r} cannot be compiled by this builder", file=path,
                         key="general.backends",
                         hint=f"build a backend it compiles: {', '.join(COMPILED_BACKENDS)}")
    frameworks.refuse_unbuildable(manifest, project)


def variant_kernels(manifest: Manifest, backend: Backend, cuda: Version | None) -> dict[str, Kernel]:
    """The kernels a variant compiles: `kernels_for(backend)`, less the CUDA kernels whose
    cuda-minver/cuda-maxver exclude the toolkit."""
    kernels = manifest.kernels_for(backend)
    if cuda is None:
        return kernels
    toolkit = (cuda.major, cuda.minor)
    return {n: k for n, k in kernels.items()
            if k.backend != Backend.CUDA or k.in_cuda_range(toolkit)}


def _cap_version(cap: str) -> Version:
    return Version(cap.split("+")[0].rstrip("af"))


def _base(cap: str) -> str:
    return cap.split("+")[0]


def loose_intersection(wanted: list[str], targets: list[str]) -> list[str]:
    """Upstream's rule for a kernel's capabilities on a list of target archs: for each target,
    the highest wanted capability of the same major at or below it (a `+PTX` one may be of an
    older major: its PTX runs forward); `9.0a`/`10.0f` are kept where their base is a target."""
    ptx = {_base(c) for c in wanted if c.endswith("+PTX")}
    plain = sorted({_base(c) for c in wanted}, key=_cap_version)
    out: list[str] = []
    rest = list(targets)
    for cap in [c for c in plain if c[-1] in "af"]:
        plain.remove(cap)
        if cap[:-1] in rest:
            rest.remove(cap[:-1])
            out.append(cap)
    for target in rest:
        best = None
        for cap in plain:
            if _cap_version(cap) > _cap_version(target):
                break
            if cap in ptx or _cap_version(cap).major == _cap_version(target).major:
                best = cap
        if best and best not in out:
            out.append(best)
    return sorted((c + "+PTX" if c in ptx else c for c in out), key=lambda c: (_cap_version(c), c))


def capability_targets(cuda: CudaToolkit,
                       local_capabilities: list[str] | None) -> tuple[list[str], list[str]]:
    """(target archs for the intersection, archs of kernels that declare none): the toolkit's
    defaults, or only the local GPU's capabilities for a local build."""
    if local_capabilities:  # a GPU of capability 9.0 is the target of a `9.0a` kernel too
        return [_base(c).rstrip("af") for c in local_capabilities], list(local_capabilities)
    defaults = default_capabilities(cuda.version)
    return [_base(c) for c in defaults], defaults


@dataclass(frozen=True)
class CudaTargets:
    """What each CUDA kernel of a variant is compiled for."""
    archs: dict[str, list[str]]       # kernel → capabilities its code runs on
    link_only: dict[str, str]         # kernel → capability of the PTX a local build emits
    notes: tuple[str, ...]            # one line per kernel whose capabilities were cut


def _nvcc_has(cap: str, supported: set[str]) -> bool:
    """Whether nvcc (its `supported_archs`) compiles for `cap` (`9.0a`: where it has 9.0)."""
    return _base(cap) in supported or _base(cap).rstrip("af") in supported


def _dropped_reason(cap: str, targets: list[str], nvcc: Version, supported: set[str]) -> str:
    """Why the intersection left out a declared capability."""
    base, v = _base(cap), _cap_version(cap)
    if not _nvcc_has(cap, supported):
        return f"nvcc {nvcc} cannot compile it"
    if base[-1] in "af":
        return f"{base[:-1]} is not one of the targets"
    if cap.endswith("+PTX"):
        return "no target at or above it"
    if not any(_cap_version(t).major == v.major and _cap_version(t) >= v for t in targets):
        return f"no target of major {v.major} at or above it"
    return f"its targets take a higher capability of major {v.major}"


def cuda_targets(kernels: dict[str, Kernel], cuda: CudaToolkit, project: Path,
                 local_capabilities: list[str] | None = None) -> CudaTargets:
    """Each CUDA kernel's capabilities: its declared ones intersected with the targets as
    upstream does (`loose_intersection`), the targets' defaults for a kernel declaring none.
    A release build refuses a kernel left with none and names what was dropped. A local build
    compiles a kernel its capabilities cannot run as PTX for one declared capability, so that
    the binding, which may call into every kernel, still links; it refuses only when no kernel
    is left to run."""
    supported = set(cuda.supported_archs)
    targets, fallback = capability_targets(cuda, local_capabilities)
    for cap in local_capabilities or []:
        if not _nvcc_has(cap, supported):
            raise BuildError(f"nvcc {cuda.version} cannot compile for capability {cap}",
                             hint="pass --cuda-capabilities with capabilities this toolkit supports: "
                                  + ", ".join(sorted(supported, key=lambda s: Version(s.rstrip("af")))))
    where = (f"this build's capabilities ({', '.join(local_capabilities)})" if local_capabilities else
             f"nvcc {cuda.version}'s targets ({', '.join(targets)})")
    archs: dict[str, list[str]] = {}
    link_only: dict[str, str] = {}
    notes: list[str] = []
    for name, kernel in kernels.items():
        if kernel.backend != Backend.CUDA:
            continue
        declared = list(kernel.cuda_capabilities or [])
        if not declared:
            archs[name] = list(fallback)
            continue
        kept = [c for c in loose_intersection(declared, targets) if _nvcc_has(c, supported)]
        key = f"kernel.{name}.cuda-capabilities"
        if kept:
            archs[name] = kept
            dropped = [c for c in declared if _base(c) not in {_base(k) for k in kept}]
            if dropped and not local_capabilities:
                notes.append(f"kernel {name}: " + "; ".join(
                    f"{c} dropped: {_dropped_reason(c, targets, cuda.version, supported)}"
                    for c in dropped))
            continue
        if not local_capabilities:
            raise BuildError(f"none of the capabilities {declared} matches {where}",
                             file=project / MANIFEST, key=key,
                             hint="list a capability of the same major at or below one of those "
                                  "targets, or bound the kernel with cuda-minver")
        compilable = sorted((c for c in declared if _nvcc_has(c, supported)), key=_cap_version)
        if not compilable:
            raise BuildError(f"nvcc {cuda.version} can compile none of the capabilities "
                             f"{declared}, and the binding may call into this kernel",
                             file=project / MANIFEST, key=key,
                             hint="bound the kernel with cuda-minver/cuda-maxver, or build with "
                                  "a toolkit that supports them")
        link_only[name] = _base(compilable[0])
        notes.append(f"kernel {name}: not compiled for {', '.join(local_capabilities)} (it declares "
                     f"{', '.join(declared)}); PTX for {link_only[name]} only, so that the "
                     "binding links")
    if local_capabilities and link_only and not archs:
        listing = "; ".join(f"{n}: {', '.join(kernels[n].cuda_capabilities)}" for n in link_only)
        raise BuildError(f"no kernel runs on {', '.join(local_capabilities)} ({listing})",
                         file=project / MANIFEST,
                         key=f"kernel.{next(iter(link_only))}.cuda-capabilities",
                         hint="build for a GPU these kernels were written for, or without "
                              "--cuda-capabilities")
    return CudaTargets(archs, link_only, tuple(notes))


def plan_variant(project: Path, manifest: Manifest, torch: TorchInstall, backend: Backend, *,
                 toolkit: Toolkit = Toolkit(),
                 local_capabilities: list[str] | None = None) -> VariantPlan:
    """`toolkit`: what the build environment provides (a realised matrix environment's CUDA).
    `local_capabilities`: compile CUDA kernels only for these (a build for the GPU at hand,
    recorded in metadata so it is never published)."""
    project = project.resolve()
    backend = listed_backend(manifest, backend, project)
    _check_buildable(manifest, backend, project)
    if manifest.torch:
        _check_bounds(torch.torch_release, manifest.torch.minver, manifest.torch.maxver,
                      what="torch", key="torch", project=project)
    cuda = None
    targets = CudaTargets({}, {}, ())
    if backend == Backend.CUDA:
        cuda = find_cuda(torch, toolkit)
        _check_bounds(cuda.version, manifest.general.cuda.minver, manifest.general.cuda.maxver,
                      what="CUDA", key="general.cuda", project=project)
    kernels = variant_kernels(manifest, backend, cuda.version if cuda else None)
    if cuda:
        targets = cuda_targets(kernels, cuda, project, local_capabilities)
    variant = variant_of(torch, backend, cuda.version if cuda else None)
    uid, git = build_uid(project, input_files(project, manifest))
    plan = VariantPlan(project=project, manifest=manifest, variant=variant, torch=torch, uid=uid,
                       git=git, kernels=kernels, cuda=cuda, kernel_archs=targets.archs,
                       local_capabilities=tuple(local_capabilities) if cuda and local_capabilities
                       else None, link_only=targets.link_only,
                       capability_notes=targets.notes)
    return frameworks.apply(plan)  # a stable-ABI project gets its torch-stable-abi variant


def made_for(project: Path, manifest: Manifest, torch: TorchInstall | None) -> dict[str, Backend]:
    """The variants a build for `torch` writes (by name), one per listed backend it can build:
    every backend of a noarch project; else the compiled ones (CUDA with a CUDA torch), under
    the stable-ABI name where the manifest asks for one and the torch is new enough."""
    if manifest.is_noarch:
        return {Variant.noarch(b).name: Backend(b) for b in manifest.general.backends}
    made: dict[str, Backend] = {}
    for backend in map(Backend, manifest.general.backends):
        if torch is None or backend not in COMPILED_BACKENDS or (
                backend == Backend.CUDA and not torch.cuda):
            continue
        variant = variant_of(torch, backend)
        stable = frameworks.stable_abi_version(manifest, backend, project)
        if stable is not None:
            if (torch.torch_release.major, torch.torch_release.minor) < stable:
                continue
            variant = frameworks.stable_variant(variant, stable)
        made[variant.name] = backend
    return made


def plan_noarch(project: Path, manifest: Manifest, backend: Backend) -> VariantPlan:
    project = project.resolve()
    backend = listed_backend(manifest, backend, project)
    uid, git = build_uid(project, input_files(project, manifest))
    noarch = manifest.torch_noarch
    key = backend.needs.archs_key  # cuda-capabilities, rocm-archs
    declared = getattr(noarch, key) if key else None
    archs = {"noarch": list(declared)} if declared else {}
    return VariantPlan(project=project, manifest=manifest, variant=Variant.noarch(backend),
                       torch=None, uid=uid, git=git, kernel_archs=archs)
