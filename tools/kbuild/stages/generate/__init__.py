"""A variant plan → the build files (CMake project, registration.h, _ops.py) from templates.

Values from the manifest and the file system reach CMake only as data: `plan.cmake` sets each
one as a quoted argument with `\\`, `"` and `$` escaped, so CMake never expands `${...}` or
`$ENV{...}` in them; a value CMake cannot carry faithfully (a `;`, which splits lists, a control
character, or `$<`, which starts a generator expression) is refused naming its key.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from packaging.version import Version

from ...core.backend import Backend
from ...core.errors import BuildError
from ...core.files import write_atomic
from ...core.layout import MANIFEST, Layout
from . import cutlass, schedule
from .. import frameworks
from ..plan import VariantPlan
from ..toolchain import NVCC_SAFE, NVCC_SAFE_TEXT

TEMPLATES = resources.files("kbuild") / "resources" / "templates"
CUDA_SUFFIXES = (".cu",)
COMPILED_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".cu")
EXTENSION_NAME = re.compile(rb"\bTORCH_EXTENSION_NAME\b")
_UNSAFE = re.compile(r"[;\x00-\x1f\x7f]|\$<")
_IDENT = re.compile(r"^[A-Za-z0-9_]+$")
# torch's nvcc flags as upstream gets them (find_package(Torch) and COMMON_NVCC_FLAGS without the
# __CUDA_NO_HALF*/BFLOAT16 defines), for every CUDA source.
CUDA_COMMON_FLAGS = ("--expt-relaxed-constexpr", "--expt-extended-lambda", "-DENABLE_FP8")
BUILD_FOLDER = "cmake-build"  # the CMake build folder inside a variant's work dir


def template(name: str) -> str:
    return (TEMPLATES / name).read_text(encoding="utf-8")


def work_dir(plan: VariantPlan) -> Path:
    return Layout.of(plan.project).variant_work(plan.name)


def write_if_changed(path: Path, text: str) -> bool:
    """Writes atomically, and only when the content differs (keeps ninja's no-op builds no-op)."""
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text)
    return True


def cmake_quote(value: str) -> str:
    """A CMake quoted argument whose value is `value`, literally."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


def cmake_ident(name: str) -> str:
    """A CMake-safe identifier for a kernel name (used in variable and target names)."""
    if _IDENT.match(name):
        return name
    return re.sub(r"[^A-Za-z0-9_]", "_", name) + "_" + hashlib.sha256(name.encode()).hexdigest()[:8]


class _Values:
    """The variables of plan.cmake, each value checked against what CMake can carry."""

    def __init__(self, project: Path) -> None:
        self.project = project
        self.lines: list[str] = []

    def set(self, var: str, values: str | list[str], key: str | None = None) -> None:
        items = [values] if isinstance(values, str) else list(values)
        for v in items:
            bad = _UNSAFE.search(v)
            if bad:
                what = {";": "a ';'", "$<": "'$<'"}.get(bad.group(), "a control character")
                raise BuildError(f"{v!r} contains {what}, which CMake cannot pass on as one value",
                                 file=self.project / MANIFEST if key else self.project, key=key,
                                 hint="remove it" + ("" if key else " (rename the directory)"))
        self.lines.append(f"set({var} " + " ".join(cmake_quote(v) for v in items) + ")"
                          if items else f"set({var})")


def check_nvcc_values(project: Path, values: list[str], key: str | None) -> None:
    for v in values:
        if not NVCC_SAFE.match(v):
            bad = sorted(set(re.sub(r"[A-Za-z0-9_\-+=.,/:@%^]", "", v)))
            raise BuildError(
                f"{v!r} contains {''.join(bad)!r}: nvcc passes it to a shell, which would "
                "interpret it", file=project / MANIFEST if key else project, key=key,
                hint=f"use only {NVCC_SAFE_TEXT} in what CUDA sources "
                     "see" + ("" if key else " (build from a folder with such a path)"))


def check_cuda_kernel(plan: VariantPlan, name: str, kernel, includes: list[str]) -> None:
    """Everything nvcc will see for this kernel's .cu files is shell-inert."""
    project, k = plan.project, f"kernel.{name}"
    if not any(s.endswith(CUDA_SUFFIXES) for s in kernel.src):
        return
    check_nvcc_values(project, [str(project)], None)
    check_nvcc_values(project, list(kernel.cuda_flags), f"{k}.cuda-flags")
    check_nvcc_values(project, [s for s in kernel.src if s.endswith(CUDA_SUFFIXES)], f"{k}.src")
    check_nvcc_values(project, list(kernel.include), f"{k}.include")
    check_nvcc_values(project, includes, None)


def cmake_arch(cap: str) -> str:
    base, ptx = cap.split("+")[0], cap.endswith("+PTX")
    num = base.replace(".", "")
    return num if ptx else f"{num}-real"


def unit_cmake_archs(unit: CompileUnit) -> list[str]:
    """CUDA_ARCHITECTURES of a unit: SASS (and PTX) per capability, or PTX alone (no ptxas) for
    a kernel a local build cannot run."""
    if unit.ptx_only:
        return [unit.ptx_only.replace(".", "") + "-virtual"]
    return [cmake_arch(c) for c in unit.archs]


def cxx_standard(plan: VariantPlan) -> int:
    """As upstream (its extension target): C++17 for C++ sources with a torch older than 2.12,
    C++20 from 2.12 on; CUDA sources keep nvcc's own default."""
    release = plan.torch.torch_release
    return 17 if (release.major, release.minor) < (2, 12) else 20


def torch_libs(plan: VariantPlan) -> list[str]:
    lib = Path(plan.torch.lib_dir)
    names = ["c10", "torch", "torch_cpu"] + (["c10_cuda", "torch_cuda"]
                                             if plan.backend == Backend.CUDA else [])
    libs = [str(lib / f"lib{n}.so") for n in names]
    return libs + ([plan.cuda.cudart] if plan.cuda else [])


def mentions_extension_name(files: list[Path]) -> bool:
    return any(f.is_file() and EXTENSION_NAME.search(f.read_bytes()) for f in files)


def backend_definitions(plan: VariantPlan) -> list[str]:
    """What upstream defines for every source of a variant: `<BACKEND>_KERNEL`, and `USE_CUDA=1`
    for CUDA (its preamble.cmake)."""
    return [plan.backend.kernel_define] + (["USE_CUDA=1"] if plan.backend == Backend.CUDA else [])


def torch_definitions(plan: VariantPlan) -> list[str]:
    defs = ["Py_LIMITED_API=0x03090000", f"_GLIBCXX_USE_CXX11_ABI={int(plan.torch.cxx11_abi)}"]
    stable = plan.stable_abi
    if stable:
        defs.append(f"TORCH_TARGET_VERSION={frameworks.target_version_hex(stable)}")
    return defs


@dataclass
class CompileUnit:
    """One object library: a kernel's own compiled sources, or sources that several kernels of
    the variant list (compiled once, for all their capabilities, as upstream does)."""
    name: str
    kernels: list[str]
    files: list[Path]
    includes: list[str] = field(default_factory=list)
    cxx_flags: list[str] = field(default_factory=list)
    cuda_flags: list[str] = field(default_factory=list)
    archs: list[str] = field(default_factory=list)
    uses_torch: bool = False
    ptx_only: str | None = None  # a local build's kernel it cannot run: this capability's PTX


def _merged(lists) -> list[str]:
    return list(dict.fromkeys(v for values in lists for v in values))


def compile_units(plan: VariantPlan, includes: dict[str, list[str]]) -> list[CompileUnit]:
    """The variant's kernels as object libraries: a compiled file listed by several kernels goes
    into one shared unit (merged includes and flags, the union of capabilities); headers stay
    with every kernel that lists them."""
    project = plan.project
    owners: dict[Path, list[str]] = {}
    for name, kernel in plan.kernels.items():
        for s in kernel.src:
            f = project / s
            if f.suffix in COMPILED_SUFFIXES and name not in owners.setdefault(f, []):
                owners[f].append(name)
    units = []
    for name, kernel in plan.kernels.items():
        files = [project / s for s in kernel.src if len(owners.get(project / s, [name])) == 1]
        units.append(CompileUnit(name, [name], files, includes[name], list(kernel.cxx_flags),
                                 list(kernel.cuda_flags), plan.kernel_archs.get(name, []),
                                 "torch" in kernel.depends, plan.link_only.get(name)))
    shared: dict[tuple[str, ...], list[Path]] = {}
    for f, names in owners.items():
        if len(names) > 1:
            shared.setdefault(tuple(names), []).append(f)
    for names, files in shared.items():
        ks = [plan.kernels[n] for n in names]
        archs = sorted(set(_merged(plan.kernel_archs.get(n, []) for n in names)),
                       key=lambda c: (Version(c.split("+")[0].rstrip("af")), c))
        headers = [plan.project / s for k in ks for s in k.src if (plan.project / s) not in owners]
        units.append(CompileUnit("+".join(names), list(names), files + list(dict.fromkeys(headers)),
                                 _merged(includes[n] for n in names),
                                 _merged(k.cxx_flags for k in ks), _merged(k.cuda_flags for k in ks),
                                 archs, any("torch" in k.depends for k in ks),
                                 # compiled for the kernels that run, if any does
                                 None if archs else plan.link_only.get(names[0])))
    # A kernel whose files are all headers (or all shared) compiles nothing of its own.
    return [u for u in units if any(f.suffix in COMPILED_SUFFIXES for f in u.files)]


def scheduled(units: list[CompileUnit], seconds: dict[Path, float]) -> list[CompileUnit]:
    """The units, and the files of each, in the order Ninja should start them: the slowest of
    the previous build first (stages/generate/schedule.py); unchanged without a previous build."""
    if not seconds:
        return units
    for unit in units:
        unit.files = schedule.slowest_first(unit.files, seconds)
    return schedule.slowest_groups_first(units, lambda u: u.files, seconds)


def plan_cmake(plan: VariantPlan) -> str:
    torch, project = plan.torch, plan.project
    torch_cfg = plan.manifest.torch
    dep_includes, dep_dirs = cutlass.kernel_includes(plan)
    all_dep_includes = list(dict.fromkeys(d for dirs in dep_includes.values() for d in dirs))
    # The toolkit's headers first, then those of torch's CUDA libraries (as upstream's torch).
    cuda_includes = (list(dict.fromkeys(plan.cuda.include_dirs + torch.cuda_library_include_dirs))
                     if plan.cuda else [])
    torch_includes = list(torch.include_dirs) + cuda_includes
    toolkit = [str(plan.cuda.root)] if plan.cuda else []
    # As upstream, the project's csrc/ is on every source's include path.
    common_includes = [str(project / "csrc")] if (project / "csrc").is_dir() else []
    v = _Values(project)
    v.set("KB_ID", plan.kernel_id)
    v.set("KB_BACKEND", plan.backend)
    v.set("KB_PROJECT_DIR", str(project))
    v.set("KB_PREFIX_MAP_DIRS", [torch.site_packages] + toolkit + dep_dirs)
    v.set("KB_TOOLKIT_DIRS", toolkit + dep_dirs)
    v.set("KB_CXX_STD", str(cxx_standard(plan)))
    v.set("KB_TORCH_INCLUDES", torch_includes)
    v.set("KB_PYTHON_INCLUDE", torch.python_include)
    v.set("KB_TORCH_LIBS", torch_libs(plan))
    v.set("KB_BACKEND_DEFINITIONS", backend_definitions(plan))
    v.set("KB_TORCH_DEFINITIONS", torch_definitions(plan))
    v.set("KB_CUDA_COMMON_FLAGS", list(CUDA_COMMON_FLAGS) if plan.cuda else [])
    v.set("KB_BINDING_SOURCES", [str(project / s) for s in torch_cfg.src], "torch.src")
    v.set("KB_BINDING_INCLUDES", [str(project / d) for d in torch_cfg.include] + common_includes
          + all_dep_includes, "torch.include")
    v.set("KB_BINDING_CXX_FLAGS", list(torch_cfg.cxx_flags), "torch.cxx-flags")
    includes = {}
    for name, kernel in plan.kernels.items():
        includes[name] = ([str(project / d) for d in kernel.include] + common_includes
                          + dep_includes.get(name, []))
        if plan.cuda and kernel.backend == Backend.CUDA:
            # A torch-free kernel sees the toolkit alone (its objects are shared across torch
            # versions); torch's CUDA libraries' headers go with torch.
            uses_torch = "torch" in kernel.depends
            includes[name] += cuda_includes if uses_torch else list(plan.cuda.include_dirs)
            env_dirs = [torch.site_packages, torch.python_include, *torch_includes] if uses_torch else []
            check_cuda_kernel(plan, name, kernel, includes[name] + toolkit + dep_dirs + env_dirs)
    units = compile_units(plan, includes)
    # The link takes the kernels' objects in this order; Ninja starts them slowest first.
    v.set("KB_KERNELS_LINK", [cmake_ident(u.name) for u in units])
    units = scheduled(units, schedule.previous_seconds(work_dir(plan) / BUILD_FOLDER))
    idents = [cmake_ident(u.name) for u in units]
    v.set("KB_KERNELS", idents)
    for ident, unit in zip(idents, units):
        p, k = f"KB_KERNEL_{ident}_", f"kernel.{unit.kernels[0]}"
        compiled = [str(f) for f in unit.files if f.suffix in COMPILED_SUFFIXES]
        v.set(p + "SOURCES", [str(f) for f in unit.files], f"{k}.src")
        v.set(p + "CXX_SOURCES", [s for s in compiled if not s.endswith(CUDA_SUFFIXES)], f"{k}.src")
        v.set(p + "CUDA_SOURCES", [s for s in compiled if s.endswith(CUDA_SUFFIXES)], f"{k}.src")
        v.set(p + "INCLUDES", unit.includes, f"{k}.include")
        v.set(p + "USES_TORCH", "ON" if unit.uses_torch else "OFF")
        v.set(p + "EXTENSION_NAME", "ON" if mentions_extension_name(unit.files) else "OFF")
        v.set(p + "CXX_FLAGS", unit.cxx_flags, f"{k}.cxx-flags")
        v.set(p + "CUDA_FLAGS", unit.cuda_flags, f"{k}.cuda-flags")
        v.set(p + "ARCHS", unit_cmake_archs(unit), f"{k}.cuda-capabilities")
    return template("plan.cmake.in").replace("@VARIANT@", plan.name).replace("@BODY@", "\n".join(v.lines))


def ops_py(plan: VariantPlan) -> str:
    name = "_ops.py.in" if plan.compiled else "_ops_noarch.py.in"
    return template(name).replace("@ID@", plan.kernel_id)


def generate(plan: VariantPlan) -> Path:
    """Writes the build files of `plan` into its work dir and returns that dir."""
    out = work_dir(plan)
    cmake = plan_cmake(plan) if plan.compiled else None  # refusals before anything is written
    write_if_changed(out / "_ops.py", ops_py(plan))
    if cmake is not None:
        write_if_changed(out / "plan.cmake", cmake)
        for name in ("CMakeLists.txt", "registration.h", "abi_shim.cpp", "torch_pch.h"):
            write_if_changed(out / name, template(name))
        write_if_changed(out / "extension.cpp", template("extension.cpp").replace(
            "@ID@", plan.kernel_id).replace("@VARIANT@", plan.name))
    return out
