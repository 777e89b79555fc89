"""Stage 4: a variant plan → the build files (CMake project, registration.h, _ops.py) from templates."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from ..core.layout import Layout
from .plan import VariantPlan

TEMPLATES = resources.files("kbuild") / "resources" / "templates"
CUDA_SUFFIXES = (".cu",)
COMPILED_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".cu")


def template(name: str) -> str:
    return (TEMPLATES / name).read_text(encoding="utf-8")


def work_dir(plan: VariantPlan) -> Path:
    return Layout.of(plan.project).variant_work(plan.name)


def write_if_changed(path: Path, text: str) -> bool:
    """Writes atomically, and only when the content differs (keeps ninja's no-op builds no-op)."""
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return True


def _cmake_list(values: list[str] | tuple[str, ...]) -> str:
    return '"' + ";".join(str(v).replace("\\", "/").replace('"', '\\"') for v in values) + '"'


def cmake_arch(cap: str) -> str:
    base, ptx = cap.split("+")[0], cap.endswith("+PTX")
    num = base.replace(".", "")
    return num if ptx else f"{num}-real"


def torch_libs(plan: VariantPlan) -> list[str]:
    lib = Path(plan.torch.lib_dir)
    names = ["c10", "torch", "torch_cpu"] + (["c10_cuda", "torch_cuda"] if plan.backend == "cuda" else [])
    libs = [str(lib / f"lib{n}.so") for n in names]
    return libs + ([plan.cuda.cudart] if plan.cuda else [])


def plan_cmake(plan: VariantPlan) -> str:
    torch, project = plan.torch, plan.project
    torch_cfg = plan.manifest.torch
    defs = ["Py_LIMITED_API=0x03090000", f"_GLIBCXX_USE_CXX11_ABI={int(torch.cxx11_abi)}",
            f"{plan.backend.upper()}_KERNEL"]
    torch_includes = list(torch.include_dirs) + (plan.cuda.include_dirs if plan.cuda else [])
    lines = {
        "KB_ID": plan.kernel_id,
        "KB_BACKEND": plan.backend,
        "KB_PROJECT_DIR": str(project),
        "KB_PREFIX_MAP_DIRS": [torch.site_packages] + ([str(plan.cuda.root)] if plan.cuda else []),
        "KB_TOOLKIT_DIRS": [str(plan.cuda.root)] if plan.cuda else [],
        "KB_CXX_STD": str(torch.cxx_std),
        "KB_TORCH_INCLUDES": torch_includes,
        "KB_PYTHON_INCLUDE": torch.python_include,
        "KB_TORCH_LIBS": torch_libs(plan),
        "KB_TORCH_DEFINITIONS": defs,
        "KB_BINDING_SOURCES": [str(project / s) for s in torch_cfg.src],
        "KB_BINDING_INCLUDES": [str(project / d) for d in torch_cfg.include],
        "KB_BINDING_CXX_FLAGS": torch_cfg.cxx_flags,
        "KB_KERNELS": list(plan.kernels),
    }
    for name, kernel in plan.kernels.items():
        p = f"KB_KERNEL_{name}_"
        uses_torch = "torch" in kernel.depends
        lines[p + "SOURCES"] = [str(project / s) for s in kernel.src]
        includes = [str(project / d) for d in kernel.include]
        if plan.cuda and kernel.backend == "cuda":
            includes += plan.cuda.include_dirs
        lines[p + "INCLUDES"] = includes
        lines[p + "USES_TORCH"] = "ON" if uses_torch else "OFF"
        # Torch-free kernels use C++17 so their objects do not depend on the torch version.
        lines[p + "CXX_STD"] = str(torch.cxx_std if uses_torch else 17)
        lines[p + "CXX_FLAGS"] = kernel.cxx_flags
        lines[p + "CUDA_FLAGS"] = kernel.cuda_flags
        lines[p + "ARCHS"] = [cmake_arch(c) for c in plan.kernel_archs.get(name, [])]
    body = "\n".join(
        f"set({k} {_cmake_list(v) if isinstance(v, list) else _cmake_list([v])})"
        for k, v in lines.items())
    return template("plan.cmake.in").replace("@VARIANT@", plan.name).replace("@BODY@", body)


def ops_py(plan: VariantPlan) -> str:
    name = "_ops.py.in" if plan.compiled else "_ops_noarch.py.in"
    return template(name).replace("@ID@", plan.kernel_id)


def generate(plan: VariantPlan) -> Path:
    """Writes the build files of `plan` into its work dir and returns that dir."""
    out = work_dir(plan)
    write_if_changed(out / "_ops.py", ops_py(plan))
    if plan.compiled:
        write_if_changed(out / "plan.cmake", plan_cmake(plan))
        for name in ("CMakeLists.txt", "registration.h", "abi_shim.cpp"):
            write_if_changed(out / name, template(name))
        write_if_changed(out / "extension.cpp", template("extension.cpp").replace("@ID@", plan.kernel_id))
    return out
