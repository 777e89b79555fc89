"""generate: every value reaches CMake as data (read back with `cmake -P`), unsafe ones are refused
naming their key, TORCH_EXTENSION_NAME is the build id, dependencies and the stable ABI."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import pytest

from kbuild.stages.generate import cutlass
from kbuild.stages import generate
from kbuild.stages.compile import _tool
from kbuild.core import manifest as manifest_mod
from kbuild.core.errors import BuildError
from kbuild.core.runner import capture
from kbuild_testing import cpu_kernel, make_probe_project, plan_of

NASTY = ["${HOME}", "$ENV{PATH}", '"q"', "it's", "a\\b", "#c", "x)y(", "@ONLY@", "1>0", "a,b",
         '") execute_process(COMMAND touch pwned) #', "$(touch pwned)", "`touch pwned`"]


def read_back(plan_cmake: str, tmp: Path, variables: list[str]) -> dict[str, list[str]]:
    """The variables as CMake itself sees them after including plan.cmake."""
    (tmp / "plan.cmake").write_text(plan_cmake)
    script = tmp / "dump.cmake"
    script.write_text(textwrap.dedent(f"""
        include("{tmp}/plan.cmake")
        file(WRITE "{tmp}/dump.txt" "")
        foreach(var {' '.join(variables)})
          foreach(item IN LISTS ${{var}})
            file(APPEND "{tmp}/dump.txt" "${{var}}\\t${{item}}\\n")
          endforeach()
        endforeach()
    """))
    proc = capture([_tool("cmake"), "-P", str(script)], cwd=tmp)
    assert proc.returncode == 0, proc.stderr
    out: dict[str, list[str]] = {v: [] for v in variables}
    for line in (tmp / "dump.txt").read_text().splitlines():
        var, _, value = line.partition("\t")
        out[var].append(value)
    return out


def test_values_reach_cmake_literally_and_nothing_runs(tmp_path):
    src = "csrc/${HOME} $ENV{X}.cpp"
    project = make_probe_project(tmp_path / "we$ird 'p\"roj",
                           kernels={"k": cpu_kernel([src], **{"cxx-flags": NASTY})},
                           torch_extra={"cxx-flags": NASTY}, files={src: ""})
    manifest = manifest_mod.load(project)
    assert list(manifest.kernel["k"].cxx_flags) == NASTY
    text = generate.plan_cmake(plan_of(project))
    got = read_back(text, tmp_path, ["KB_BINDING_CXX_FLAGS", "KB_KERNEL_k_CXX_FLAGS",
                                     "KB_KERNEL_k_SOURCES", "KB_PROJECT_DIR", "KB_ID"])
    assert got["KB_BINDING_CXX_FLAGS"] == NASTY
    assert got["KB_KERNEL_k_CXX_FLAGS"] == NASTY
    assert got["KB_KERNEL_k_SOURCES"] == [str(project.resolve() / "csrc/${HOME} $ENV{X}.cpp")]
    assert got["KB_PROJECT_DIR"] == [str(project.resolve())]
    assert got["KB_ID"] == ["_probe_cpu_abc1234"]
    assert not list(tmp_path.rglob("pwned"))


@pytest.mark.parametrize("value, what", [("-DA=1;-DB=2", "a ';'"), ("-DA=\n", "a control character"),
                                         ("-DA=$<TARGET_FILE:x>", "'$<'")])
def test_values_cmake_cannot_carry_are_refused_naming_the_key(tmp_path, value, what):
    project = make_probe_project(tmp_path / "p", files={"csrc/k.cpp": ""},
                           kernels={"k": cpu_kernel(["csrc/k.cpp"], **{"cxx-flags": [value]})})
    with pytest.raises(BuildError) as e:  # by the manifest (control characters) or by generate
        generate.generate(plan_of(project))
    assert e.value.key.startswith("kernel.k.cxx-flags")
    assert what in e.value.message or "control characters" in e.value.message
    assert Path(e.value.file).resolve() == project.resolve() / "build.toml"
    assert not (project / ".kbuild").exists()  # refused before anything is written


def test_a_project_path_cmake_cannot_carry_is_refused(tmp_path):
    project = make_probe_project(tmp_path / "semi;colon")
    with pytest.raises(BuildError) as e:
        generate.plan_cmake(plan_of(project))
    assert e.value.key is None and "';'" in e.value.message and "rename the directory" in e.value.hint


def test_kernel_names_become_safe_cmake_identifiers():
    assert generate.cmake_ident("gemm_sm90") == "gemm_sm90"
    odd = generate.cmake_ident("gemm-sm90.v2")
    assert generate._IDENT.match(odd) and odd.startswith("gemm_sm90_v2_")
    assert odd != generate.cmake_ident("gemm_sm90_v2")


def test_extension_name_is_the_build_id_for_the_binding_and_kernels_that_name_it(tmp_path):
    project = make_probe_project(tmp_path / "p", kernels={
        "plain": cpu_kernel(["csrc/plain.cpp"]),
        "named": {**cpu_kernel(["csrc/named.cpp", "csrc/named.h"]), "depends": ["torch"]}},
        files={"csrc/plain.cpp": "int f() { return 1; }  // TORCH_EXTENSION_NAMES is not it\n",
               "csrc/named.cpp": '#include "named.h"\n',
               "csrc/named.h": "const char* n = STRINGIFY(TORCH_EXTENSION_NAME);\n"})
    got = read_back(generate.plan_cmake(plan_of(project)), tmp_path,
                    ["KB_KERNEL_plain_EXTENSION_NAME", "KB_KERNEL_named_EXTENSION_NAME",
                     "KB_KERNEL_named_CXX_SOURCES", "KB_CXX_STD"])
    assert got["KB_KERNEL_plain_EXTENSION_NAME"] == ["OFF"]
    assert got["KB_KERNEL_named_EXTENSION_NAME"] == ["ON"]
    assert got["KB_KERNEL_named_CXX_SOURCES"] == [str(project.resolve() / "csrc/named.cpp")]
    assert got["KB_CXX_STD"] == ["20"]  # C++20 with torch 2.13, as upstream
    cmakelists = generate.template("CMakeLists.txt")
    assert 'COMPILE_DEFINITIONS "TORCH_EXTENSION_NAME=${KB_ID}"' in cmakelists
    assert "kb_extension" not in cmakelists and "-fno-gnu-unique" in cmakelists


def test_registration_header_expands_the_name_and_pyinit_is_weak():
    header = generate.template("registration.h")
    assert "#define TORCH_LIBRARY_EXPAND(NAME, MODULE) TORCH_LIBRARY(NAME, MODULE)" in header
    assert "STABLE_TORCH_LIBRARY_EXPAND(NAME, MODULE) STABLE_TORCH_LIBRARY(NAME, MODULE)" in header
    assert "#include <torch/library.h>" not in header  # stable-ABI bindings must not get it
    assert "__attribute__((weak" in generate.template("extension.cpp")


def test_stable_abi_variant_compiles_with_torch_target_version(tmp_path):
    project = make_probe_project(tmp_path / "p", torch_extra={"stable-abi": "2.9"})
    plan = plan_of(project, name="torch-stable-abi29-cpu-x86_64-linux")
    got = read_back(generate.plan_cmake(plan), tmp_path, ["KB_TORCH_DEFINITIONS"])
    assert "TORCH_TARGET_VERSION=0x0209000000000000" in got["KB_TORCH_DEFINITIONS"]
    regular = read_back(generate.plan_cmake(plan_of(project)), tmp_path, ["KB_TORCH_DEFINITIONS"])
    assert not any("TORCH_TARGET_VERSION" in d for d in regular["KB_TORCH_DEFINITIONS"])


def test_cutlass_headers_are_included_and_mapped_away(tmp_path, monkeypatch):
    tree = (tmp_path / "cache" / "cutlass" / "3.8.0").resolve()
    monkeypatch.setattr(cutlass, "provision", lambda release, root=None, warn=None: tree)
    project = make_probe_project(tmp_path / "p", files={"csrc/gemm.cpp": "", "csrc/other.cpp": ""},
                           kernels={"gemm": {**cpu_kernel(["csrc/gemm.cpp"]), "depends": ["cutlass_3_8"]},
                                    "other": cpu_kernel(["csrc/other.cpp"])})
    got = read_back(generate.plan_cmake(plan_of(project)), tmp_path,
                    ["KB_KERNEL_gemm_INCLUDES", "KB_KERNEL_other_INCLUDES", "KB_BINDING_INCLUDES",
                     "KB_PREFIX_MAP_DIRS", "KB_TOOLKIT_DIRS"])
    headers = [str(tree.resolve() / "include"), str(tree.resolve() / "tools" / "util" / "include")]
    csrc = [str(project.resolve() / "csrc")]  # on every source's include path, as upstream
    assert got["KB_KERNEL_gemm_INCLUDES"] == csrc + headers
    assert got["KB_KERNEL_other_INCLUDES"] == csrc
    assert got["KB_BINDING_INCLUDES"] == csrc + headers
    assert str(tree.resolve()) in got["KB_PREFIX_MAP_DIRS"] and got["KB_TOOLKIT_DIRS"] == [str(tree.resolve())]


def cuda_plan_of(project: Path):
    """The CUDA plan of `project` against a fake toolkit (nothing is run)."""
    import dataclasses

    from packaging.version import Version

    from kbuild.stages.toolchain import CudaToolkit

    root = project.parent / "cuda"
    toolkit = CudaToolkit(nvcc=root / "bin" / "nvcc", version=Version("13.0"), root=root)
    toolkit.__dict__.update(include_dirs=[str(root / "include")], cudart=str(root / "libcudart.so"))
    plan = plan_of(project, name="torch213-cxx11-cu130-x86_64-linux")
    return dataclasses.replace(plan, cuda=toolkit,
                               kernels=plan.manifest.kernels_for("cuda"),
                               kernel_archs={n: ["8.0"] for n, k in plan.manifest.kernel.items()
                                             if k.backend == "cuda"})


def cuda_project(root: Path, src: str = "csrc/k.cu", **kernel) -> Path:
    return make_probe_project(root, backends=("cpu", "cuda"), files={src: ""}, kernels={
        "k": {"backend": "cuda", "depends": [], "src": [src], **kernel}})


def test_cuda_kernels_compile_with_shell_inert_values(tmp_path):
    project = cuda_project(tmp_path / "p", **{"cuda-flags": ["--use_fast_math", "-DN=4",
                                                              "--ptxas-options=-v,-warn-spills"],
                                              "cxx-flags": ["-DHOST=$HOME"]})
    got = read_back(generate.plan_cmake(cuda_plan_of(project)), tmp_path,
                    ["KB_KERNEL_k_CUDA_FLAGS", "KB_KERNEL_k_CUDA_SOURCES", "KB_KERNEL_k_ARCHS"])
    assert got["KB_KERNEL_k_CUDA_FLAGS"][0] == "--use_fast_math"
    assert got["KB_KERNEL_k_ARCHS"] == ["80-real"]


@pytest.mark.parametrize("kind, value, key", [
    ("cuda-flags", ["-DX=$(touch pwned)"], "kernel.k.cuda-flags"),
    ("cuda-flags", ["-DX=`touch pwned`"], "kernel.k.cuda-flags"),
    ("cuda-flags", ["-Xcompiler=-DA='b c'"], "kernel.k.cuda-flags"),
    ("src", "csrc/a $(x).cu", "kernel.k.src"),
])
def test_values_nvcc_would_hand_to_a_shell_are_refused(tmp_path, kind, value, key):
    if kind == "src":
        project = cuda_project(tmp_path / "p", src=value)
    else:
        project = cuda_project(tmp_path / "p", **{kind: value})
    with pytest.raises(BuildError) as e:
        generate.generate(cuda_plan_of(project))
    assert e.value.key == key and "nvcc passes it to a shell" in e.value.message
    assert not (project / ".kbuild").exists() and not list(tmp_path.rglob("pwned"))


def test_a_cuda_build_from_a_folder_with_shell_characters_is_refused(tmp_path):
    project = cuda_project(tmp_path / "it's $HOME")
    with pytest.raises(BuildError) as e:
        generate.plan_cmake(cuda_plan_of(project))
    assert e.value.key is None and "folder" in e.value.hint
    generate.plan_cmake(plan_of(project))  # its CPU variant is fine: g++ gets quoted arguments


@pytest.mark.parametrize("torch, std", [("2.9.1", 17), ("2.11.0", 17), ("2.12.0", 20),
                                        ("2.14.1", 20)])
def test_cxx_standard_follows_torch_as_upstream(tmp_path, torch, std):
    """Upstream: C++17 for C++ sources with a torch older than 2.12, C++20 from 2.12 on."""
    import dataclasses
    project = make_probe_project(tmp_path / "p", kernels={"k": cpu_kernel(["csrc/k.cpp"])},
                                 files={"csrc/k.cpp": ""})
    plan = plan_of(project)
    plan = dataclasses.replace(plan, torch=dataclasses.replace(plan.torch, torch_version=torch))
    got = read_back(generate.plan_cmake(plan), tmp_path, ["KB_CXX_STD"])
    assert got["KB_CXX_STD"] == [str(std)]


def test_a_kernel_a_local_build_cannot_run_is_compiled_as_ptx_only(tmp_path):
    """Its own sources get PTX for one capability (no ptxas); a source it shares with a kernel
    that runs is compiled for that kernel's capabilities only."""
    import dataclasses
    unit = generate.CompileUnit("k", ["k"], [], archs=[], ptx_only="10.0f")
    assert generate.unit_cmake_archs(unit) == ["100f-virtual"]
    runs = generate.CompileUnit("h", ["h"], [], archs=["9.0a", "8.0+PTX"])
    assert generate.unit_cmake_archs(runs) == ["90a-real", "80"]
    project = make_probe_project(tmp_path / "p", files={"csrc/api.cpp": "", "csrc/a.cpp": "",
                                                         "csrc/b.cpp": ""}, kernels={
        "hopper": cpu_kernel(["csrc/api.cpp", "csrc/a.cpp"]),
        "blackwell": cpu_kernel(["csrc/api.cpp", "csrc/b.cpp"])})
    plan = dataclasses.replace(plan_of(project), kernel_archs={"hopper": ["9.0a"]},
                               link_only={"blackwell": "10.0f"})
    units = {u.name: u for u in generate.compile_units(plan, {"hopper": [], "blackwell": []})}
    assert (units["hopper"].archs, units["hopper"].ptx_only) == (["9.0a"], None)
    assert (units["blackwell"].archs, units["blackwell"].ptx_only) == ([], "10.0f")
    shared = units["hopper+blackwell"]
    assert (shared.archs, shared.ptx_only) == (["9.0a"], None)


def test_a_kernel_of_headers_only_makes_no_unit(tmp_path):
    """sage-attention's `_qattn` lists one header: no object library without sources (CMake
    cannot link one)."""
    project = make_probe_project(tmp_path / "p", files={"csrc/k.cpp": "", "csrc/d.h": ""},
                                 kernels={"k": cpu_kernel(["csrc/k.cpp"]),
                                          "headers": cpu_kernel(["csrc/d.h"])})
    units = generate.compile_units(plan_of(project), {"k": [], "headers": []})
    assert [u.name for u in units] == ["k"]


def test_cuda_kernels_see_the_headers_of_torchs_cuda_libraries_after_the_toolkits(tmp_path):
    """As upstream's torch (its CUDA libraries propagated to kernels): curand_kernel.h from the
    nvidia-* wheels torch was installed with, searched after the toolkit's own headers, for the
    kernels that depend on torch; a torch-free kernel sees the toolkit alone (issue 42: its
    objects depend only on the toolkit and are shared across torch versions), so every folder
    on its include path is one its compile line maps away."""
    project = make_probe_project(tmp_path / "p", backends=("cpu", "cuda"),
                                 files={"csrc/t.cu": "", "csrc/free.cu": ""}, kernels={
        "t": {"backend": "cuda", "depends": ["torch"], "src": ["csrc/t.cu"]},
        "free": {"backend": "cuda", "depends": [], "src": ["csrc/free.cu"]}})
    plan = cuda_plan_of(project)
    plan = dataclasses.replace(plan, torch=dataclasses.replace(
        plan.torch, python_include=str(tmp_path / "py-include")))  # a torch kernel's nvcc sees it
    site = Path(plan.torch.site_packages) / "nvidia"
    for lib in ("cu13", "cudnn", "nccl"):
        (site / lib / "include").mkdir(parents=True)
    (site / "cu13" / "include" / "curand_kernel.h").write_text("")
    (site / "cu13" / "lib").mkdir()  # no headers: not an include dir
    got = read_back(generate.plan_cmake(plan), tmp_path,
                    ["KB_TORCH_INCLUDES", "KB_KERNEL_t_INCLUDES", "KB_KERNEL_free_INCLUDES",
                     "KB_TOOLKIT_DIRS"])
    wheels = [str(site / lib / "include") for lib in ("cu13", "cudnn", "nccl")]
    toolkit = str(tmp_path / "cuda" / "include")
    assert got["KB_KERNEL_t_INCLUDES"][-4:] == [toolkit, *wheels]
    assert got["KB_TORCH_INCLUDES"][-4:] == [toolkit, *wheels]
    assert got["KB_KERNEL_free_INCLUDES"][-1] == toolkit
    mapped = [str(project), *got["KB_TOOLKIT_DIRS"]]  # what a torch-free compile line maps
    assert all(any(d == m or d.startswith(m + "/") for m in mapped)
               for d in got["KB_KERNEL_free_INCLUDES"]), got["KB_KERNEL_free_INCLUDES"]
