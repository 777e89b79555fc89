"""The edition-5 schema as upstream's kernel-builder knows it: what it accepts parses here, into
the model, and what it refuses is refused with the key (manifest stage, in process)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbuild.core import manifest
from kbuild.core.errors import BuildError
from kbuild.core.manifest import forms
from kbuild_testing import BINDING, TORCH, kernel, make_project

def load(root: Path) -> manifest.Manifest:
    return manifest.load(root)


def refused(root: Path) -> BuildError:
    with pytest.raises(BuildError) as info:
        manifest.load(root)
    return info.value


def test_cuda_and_rocm_kernels_share_a_source(tmp_path):
    body = TORCH + kernel("act_cuda", "cuda", "csrc/act.cu", "csrc/act.hh") \
        + kernel("act_rocm", "rocm", "csrc/act.cu", "csrc/act.hh")
    m = load(make_project(tmp_path, body, backends='["cuda", "rocm"]',
                          files=BINDING + ("csrc/act.cu", "csrc/act.hh")))
    assert set(m.kernels_for("cuda")) == {"act_cuda"} and set(m.kernels_for("rocm")) == {"act_rocm"}


@pytest.mark.parametrize("header", ["common.h", "common.hh", "common.hpp", "common.cuh", "table.inc"])
def test_headers_are_shared_between_kernels_of_one_backend(tmp_path, header):
    body = TORCH + kernel("a", "cuda", "csrc/a.cu", f"csrc/{header}") \
        + kernel("b", "cuda", "csrc/b.cu", f"csrc/{header}") \
        + kernel("c", "cpu", "csrc/c.cpp", f"csrc/{header}")
    load(make_project(tmp_path, body, files=BINDING + ("csrc/a.cu", "csrc/b.cu", "csrc/c.cpp",
                                                       f"csrc/{header}")))


def test_a_source_shared_by_two_kernels_of_one_backend_is_accepted(tmp_path):
    # flash-mla's pattern: one api_impl.cu in an sm90 and an sm100 kernel (compiled once).
    body = TORCH + kernel("a", "cuda", "csrc/a.cu") + kernel("b", "cuda", "csrc/a.cu")
    m = manifest.load(make_project(tmp_path, body, files=BINDING + ("csrc/a.cu",)))
    assert set(m.kernels_for("cuda")) == {"a", "b"}


def test_a_source_listed_twice_in_one_kernel_is_refused(tmp_path):
    body = TORCH + kernel("a", "cuda", "csrc/a.cu").replace('"csrc/a.cu"', '"csrc/a.cu", "csrc/a.cu"')
    err = refused(make_project(tmp_path, body, files=BINDING + ("csrc/a.cu",)))
    assert err.key == "kernel.a.src" and "listed twice" in err.message


def test_cpu_kernels_are_part_of_the_cpu_variant_only(tmp_path):
    # As upstream: a project may define the same function once per backend (relu, rotary).
    body = TORCH + kernel("k_cpu", "cpu", "csrc/k.cpp") + kernel("k_cuda", "cuda", "csrc/k.cpp")
    m = manifest.load(make_project(tmp_path, body, files=BINDING + ("csrc/k.cpp",)))
    assert set(m.kernels_for("cuda")) == {"k_cuda"} and set(m.kernels_for("cpu")) == {"k_cpu"}


def test_binding_source_in_a_kernel_is_refused(tmp_path):
    body = TORCH + kernel("k", "cpu", "torch-ext/torch_binding.cpp")
    err = refused(make_project(tmp_path, body, files=BINDING))
    assert err.key == "kernel.k.src" and "also in `torch.src`" in err.message


FULL = """\
upstream = "https://github.com/org/demo"
source = "git@github.com:org/demo-kernel.git"
minver = "0.12"
python-depends = ["einops"]
kernel-depends = [{ repo-id = "org/dep", version = 2 }, { repo-id = "org/other", revision = "main" }]

[general.hub]
repo-id = "org/demo"
branch = "release-1"

[general.cuda]
minver = "12.6"
maxver = "13.0"
python-depends = ["nvidia-cutlass-dsl"]
kernel-depends = [{ repo-id = "org/cuda-dep", version = 1 }]

[general.xpu]
python-depends = ["onednn"]
kernel-depends = [{ repo-id = "org/xpu-dep", version = 1 }]

[general.neuron]
python-depends = ["nki"]

[general.tpu]
python-depends = []

[torch]
src = ["torch-ext/torch_binding.cpp"]
include = ["csrc"]
pyext = ["py", "json"]
minver = "2.9"
maxver = "2.14"
cxx-flags = ["-DDEMO=1"]

[kernel.main_cuda]
backend = "cuda"
depends = ["torch", "cutlass_3_8"]
src = ["csrc/main.cu"]
include = ["csrc"]
cxx-flags = ["-O2"]
cuda-capabilities = ["8.0", "9.0a", "10.0f", "12.1", "8.9+PTX"]
cuda-flags = ["--use_fast_math"]
cuda-minver = "12.8"
cuda-maxver = "13.0"

[kernel.main_rocm]
backend = "rocm"
depends = ["torch"]
src = ["csrc/main.cu"]
rocm-archs = ["gfx90a", "gfx942"]
hip-flags = ["-O3"]

[kernel.main_xpu]
backend = "xpu"
depends = ["sycl_tla"]
src = ["csrc/main_xpu.cpp"]
sycl-flags = ["-fsycl"]

[kernel.main_metal]
backend = "metal"
depends = ["metal-cpp"]
src = ["csrc/main.metal", "csrc/main.mm"]

[kernel.main_cpu]
backend = "cpu"
depends = []
src = ["csrc/main_cpu.cpp"]
"""


def test_every_table_and_key_upstream_knows(tmp_path):
    files = BINDING + ("csrc/main.cu", "csrc/main_xpu.cpp", "csrc/main.metal", "csrc/main.mm",
                       "csrc/main_cpu.cpp")
    root = make_project(tmp_path, FULL, files=files,
                        backends='["cpu", "cuda", "rocm", "xpu", "metal", "neuron", "tpu", "cann"]')
    m = load(root)
    g = m.general
    assert g.hub.branch == "release-1" and g.upstream == "https://github.com/org/demo"
    assert g.minver == "0.12.0" and g.cuda.minver == "12.6" and g.cuda.maxver == "13.0"
    assert g.python_depends_for("cuda") == ["einops", "nvidia-cutlass-dsl"]
    assert g.python_depends_for("xpu") == ["einops", "onednn"]
    assert g.python_depends_for("cpu") == ["einops"]
    assert [d.repo_id for d in g.kernel_depends_for("cuda")] == ["org/dep", "org/other", "org/cuda-dep"]
    assert [d.repo_id for d in g.kernel_depends_for("xpu")] == ["org/dep", "org/other", "org/xpu-dep"]
    assert m.torch.cxx_flags == ["-DDEMO=1"] and m.torch.pyext == ["py", "json"]
    k = m.kernel["main_cuda"]
    assert k.cuda_capabilities == ["8.0", "9.0a", "10.0f", "12.1", "8.9+PTX"]
    assert (k.cuda_minver, k.cuda_maxver) == ("12.8", "13.0")
    assert k.in_cuda_range((13, 0)) and k.in_cuda_range((12, 8)) and not k.in_cuda_range((12, 6))
    assert m.kernel["main_rocm"].rocm_archs == ["gfx90a", "gfx942"]
    assert set(m.kernels_for("metal")) == {"main_metal"}


@pytest.mark.parametrize("dep", forms.KERNEL_DEPENDS)
def test_every_dependency_name_upstream_accepts_parses(tmp_path, dep):
    body = TORCH + kernel("k", "cuda", "csrc/k.cu").replace("depends = []", f'depends = ["{dep}"]')
    assert load(make_project(tmp_path, body, files=BINDING + ("csrc/k.cu",))).kernel["k"].depends == [dep]


@pytest.mark.parametrize("text, parsed", [("2.9", "2.9"), ("2", "2.0"), ("2.10.0", "2.10"),
                                          (" 2.9 ", "2.9")])
def test_torch_bounds_are_major_minor(tmp_path, text, parsed):
    body = TORCH + f'minver = "{text}"\nmaxver = "{text}"\n'
    m = load(make_project(tmp_path, body, files=BINDING))
    assert m.torch.minver == parsed and m.torch.maxver == parsed


@pytest.mark.parametrize("spelling", ["cuda-capabilities", "cuda_capabilities"])
def test_noarch_takes_capabilities_archs_and_pyext(tmp_path, spelling):
    archs = spelling.replace("cuda-capabilities", "rocm-archs").replace("cuda_capabilities", "rocm_archs")
    body = (f'[torch-noarch]\npyext = ["py", "json"]\n{spelling} = ["8.0", "9.0a"]\n'
            f'{archs} = ["gfx942"]\n')
    m = load(make_project(tmp_path, body, backends='["cuda", "rocm"]'))
    assert m.is_noarch and m.torch_noarch.cuda_capabilities == ["8.0", "9.0a"]
    assert m.torch_noarch.rocm_archs == ["gfx942"] and m.torch_noarch.pyext == ["py", "json"]


def test_noarch_key_given_in_both_spellings_is_refused(tmp_path):
    body = '[torch-noarch]\ncuda-capabilities = ["8.0"]\ncuda_capabilities = ["9.0"]\n'
    err = refused(make_project(tmp_path, body, backends='["cuda"]'))
    assert err.key == "torch-noarch.cuda_capabilities" and "twice" in err.message


def test_tvm_ffi_project_parses(tmp_path):
    body = ('[tvm-ffi]\nsrc = ["tvm-ffi-ext/binding.cpp"]\ninclude = ["csrc"]\n'
            'cxx-flags = ["-O2"]\npyext = ["py"]\n' + kernel("k", "cuda", "csrc/k.cu"))
    root = make_project(tmp_path, body, files=("tvm-ffi-ext/binding.cpp", "csrc/k.cu"))
    m = load(root)
    assert m.framework == "tvm-ffi" and m.is_tvm_ffi and not m.is_noarch
    assert m.binding.src == ["tvm-ffi-ext/binding.cpp"]


@pytest.mark.parametrize("value, cuda, cpu", [('"2.9"', "2.9", "2.9"),
                                              ('{ cuda = "2.10" }', "2.10", None)])
def test_stable_abi_forms(tmp_path, value, cuda, cpu):
    body = TORCH + f"stable-abi = {value}\n"
    m = load(make_project(tmp_path, body, files=BINDING))
    assert m.stable_abi_for("cuda") == cuda and m.stable_abi_for("cpu") == cpu


def test_stable_abi_table_form(tmp_path):
    body = TORCH + '\n[torch.stable-abi]\ncuda = "2.9"\ncpu = "2.10"\n'
    m = load(make_project(tmp_path, body, files=BINDING))
    assert m.stable_abi_for("cuda") == "2.9" and m.stable_abi_for("cpu") == "2.10"


def test_backends_we_cannot_compile_parse(tmp_path):
    body = "[general.neuron]\npython-depends = []\n\n" + TORCH
    m = load(make_project(tmp_path, body, backends='["cpu", "neuron", "tpu", "cann"]', files=BINDING))
    assert m.general.backends == ["cpu", "neuron", "tpu", "cann"]


def test_python_dependency_of_a_backend_belongs_in_its_table(tmp_path):
    body = 'python-depends = ["nvidia-cutlass-dsl"]\n' + TORCH
    err = refused(make_project(tmp_path, body, files=BINDING))
    assert err.key == "general.python-depends" and "[general.cuda]" in err.message


@pytest.mark.parametrize("url", ["https://github.com/org/repo", "git@github.com:org/repo.git",
                                 "ssh://git@github.com/org/repo.git", "git+https://host/x.git"])
def test_git_urls(tmp_path, url):
    body = f'upstream = "{url}"\n' + TORCH
    assert load(make_project(tmp_path, body, files=BINDING)).general.upstream == url


def test_every_field_is_described_for_the_reference():
    """The build.toml reference in the docs is generated from these descriptions."""
    models = [manifest.Manifest]
    seen = set()
    while models:
        model = models.pop()
        if model in seen:
            continue
        seen.add(model)
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no description"
            models += [a for a in _model_args(field.annotation)]
    assert {"Kernel", "General", "Torch", "TorchNoarch", "TvmFfi", "Hub", "CudaGeneral",
            "XpuGeneral", "NeuronGeneral", "TpuGeneral", "KernelDependency"} <= {m.__name__ for m in seen}
    assert manifest.Manifest.model_json_schema(by_alias=True)["properties"]["torch-noarch"]


def _model_args(annotation):
    import typing
    from pydantic import BaseModel
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in typing.get_args(annotation) for m in _model_args(a)]
