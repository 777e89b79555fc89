"""The planner: which kernels a variant compiles, torch/CUDA bounds, and clean refusals of what
this builder cannot build (in process, with a stand-in torch and toolkit; nothing is run)."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.version import Version

from kbuild.stages import plan
from kbuild.core import manifest
from kbuild.core.errors import BuildError
from kbuild_testing import BINDING, TORCH, fake_toolkit, fake_torch, kernel, make_project

ARCHS_130 = ["7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "9.0a", "10.0", "10.0a", "10.0f", "11.0",
             "12.0", "12.1"]
ARCHS_126 = ["5.0", "6.0", "7.0", "7.5", "8.0", "8.6", "8.9", "9.0", "9.0a"]


def cuda_plan(root: Path, monkeypatch, toolkit: str, archs: list[str]) -> plan.VariantPlan:
    monkeypatch.setattr(plan, "find_cuda", lambda torch, toolkit_: fake_toolkit(toolkit, archs))
    torch = fake_torch("2.13.0", cuda=toolkit)
    return plan.plan_variant(root, manifest.load(root), torch, "cuda")


SM100 = TORCH + kernel("base", "cuda", "csrc/base.cu") \
    + kernel("blackwell", "cuda", "csrc/sm100.cu", extra='cuda-minver = "12.8"\n'
             'cuda-capabilities = ["10.0a"]\n') \
    + kernel("legacy", "cuda", "csrc/legacy.cu", extra='cuda-maxver = "12.9"\n') \
    + kernel("host", "cpu", "csrc/host.cpp")
SM100_FILES = BINDING + ("csrc/base.cu", "csrc/sm100.cu", "csrc/legacy.cu", "csrc/host.cpp")


def test_kernels_outside_their_cuda_range_are_left_out(tmp_path, monkeypatch):
    root = make_project(tmp_path, SM100, files=SM100_FILES)
    old = cuda_plan(root, monkeypatch, "12.6", ARCHS_126)
    assert set(old.kernels) == {"base", "legacy"}  # the cpu kernel: cpu variant only
    assert set(old.kernel_archs) == {"base", "legacy"}
    new = cuda_plan(root, monkeypatch, "13.0", ARCHS_130)
    assert set(new.kernels) == {"base", "blackwell"}
    assert new.kernel_archs["blackwell"] == ["10.0a"] and "10.0a" in new.archs


def test_cuda_range_is_inclusive(tmp_path, monkeypatch):
    body = TORCH + kernel("k", "cuda", "csrc/k.cu", extra='cuda-minver = "13.0"\ncuda-maxver = "13.0"\n')
    root = make_project(tmp_path, body, files=BINDING + ("csrc/k.cu",))
    assert set(cuda_plan(root, monkeypatch, "13.0", ARCHS_130).kernels) == {"k"}


def test_cpu_variant_ignores_cuda_kernels(tmp_path):
    root = make_project(tmp_path, SM100, files=SM100_FILES)
    p = plan.plan_variant(root, manifest.load(root), fake_torch(), "cpu")
    assert set(p.kernels) == {"host"} and p.kernel_archs == {} and p.name.startswith("torch213-")


@pytest.mark.parametrize("bounds, ok", [('minver = "2.13"', True), ('maxver = "2.13"', True),
                                        ('minver = "2.14"', False), ('maxver = "2.12"', False),
                                        ('minver = "2"\nmaxver = "2.13"', True),
                                        ('maxver = "3"', True)])
def test_torch_bounds_inclusive_major_minor(tmp_path, bounds, ok):
    root = make_project(tmp_path, TORCH + bounds + "\n", files=BINDING)
    m = manifest.load(root)
    torch = fake_torch("2.13.1")
    if ok:
        assert plan.plan_variant(root, m, torch, "cpu").name.startswith("torch213-")
    else:
        with pytest.raises(BuildError) as info:
            plan.plan_variant(root, m, torch, "cpu")
        assert info.value.key in ("torch.minver", "torch.maxver")


def test_general_cuda_bounds(tmp_path, monkeypatch):
    body = '\n[general.cuda]\nminver = "12.8"\n\n' + TORCH + kernel("k", "cuda", "csrc/k.cu")
    root = make_project(tmp_path, body, files=BINDING + ("csrc/k.cu",))
    with pytest.raises(BuildError) as info:
        cuda_plan(root, monkeypatch, "12.6", ARCHS_126)
    assert info.value.key == "general.cuda.minver" and "12.6" in info.value.message
    assert cuda_plan(root, monkeypatch, "13.0", ARCHS_130).cuda.version.major == 13


@pytest.mark.parametrize("backend", ["rocm", "metal", "xpu", "neuron", "tpu", "cann"])
def test_backends_it_cannot_compile_are_refused_by_name(tmp_path, backend):
    root = make_project(tmp_path, TORCH, backends=f'["cpu", "{backend}"]', files=BINDING)
    m = manifest.load(root)
    with pytest.raises(BuildError) as info:
        plan.plan_variant(root, m, fake_torch(), backend)
    assert info.value.key == "general.backends" and repr(backend) in info.value.message
    assert Path(info.value.file).name == "build.toml"
    assert plan.plan_variant(root, m, fake_torch(), "cpu").backend == "cpu"


def test_noarch_builds_any_backend(tmp_path):
    body = '[torch-noarch]\ncuda-capabilities = ["9.0"]\n'
    root = make_project(tmp_path, body, backends='["cuda", "neuron"]')
    m = manifest.load(root)
    assert plan.plan_noarch(root, m, "neuron").name == "torch-neuron"
    assert plan.plan_noarch(root, m, "cuda").archs == ["9.0"]


def test_tvm_ffi_is_refused_cleanly(tmp_path):
    body = '[tvm-ffi]\nsrc = ["tvm-ffi-ext/binding.cpp"]\n' + kernel("k", "cpu", "csrc/k.cpp")
    root = make_project(tmp_path, body, files=("tvm-ffi-ext/binding.cpp", "csrc/k.cpp"))
    with pytest.raises(BuildError) as info:
        plan.plan_variant(root, manifest.load(root), fake_torch(), "cpu")
    assert info.value.key == "tvm-ffi" and "tvm-ffi" in info.value.message


def test_stable_abi_builds_a_stable_variant_never_a_regular_one(tmp_path):
    root = make_project(tmp_path, TORCH + 'stable-abi = { cuda = "2.9" }\n', files=BINDING)
    m = manifest.load(root)
    assert plan.plan_variant(root, m, fake_torch(), "cpu").name.startswith("torch213-")
    (root / "build.toml").write_text((root / "build.toml").read_text().replace(
        '{ cuda = "2.9" }', '"2.9"'))
    stable = plan.plan_variant(root, manifest.load(root), fake_torch(), "cpu")
    assert stable.name == "torch-stable-abi29-cpu-x86_64-linux"
    with pytest.raises(BuildError) as info:  # a torch older than the stable ABI asked for
        plan.plan_variant(root, manifest.load(root), fake_torch("2.8.0"), "cpu")
    assert info.value.key == "torch.stable-abi"


def test_input_files_cover_binding_kernels_and_package(tmp_path):
    root = make_project(tmp_path, SM100, files=SM100_FILES).resolve()
    (root / "torch-ext" / "demo" / "layers.py").write_text("")
    files = plan.input_files(root, manifest.load(root))
    rels = {f.relative_to(root).as_posix() for f in files}
    assert {"build.toml", "torch-ext/torch_binding.cpp", "csrc/sm100.cu",
            "torch-ext/demo/__init__.py", "torch-ext/demo/layers.py"} <= rels


@pytest.mark.parametrize("wanted, targets, expected", [
    # upstream's cuda_archs_loose_intersection (utils.cmake): per target, the highest wanted
    # capability of its major at or below it; x.0a/x.0f where x.0 is a target
    (["7.5", "8.0", "8.6", "9.0", "9.0a"], ["8.0", "8.9", "9.0"], ["8.0", "8.6", "9.0a"]),
    (["8.0+PTX"], ["9.0"], ["8.0+PTX"]),           # PTX runs forward across majors
    (["8.0"], ["9.0"], []),                         # SASS does not
    (["7.0", "7.2", "10.1", "11.8"], ["7.5", "10.0", "11.0"], ["7.2"]),
    (["10.0f"], ["9.0", "10.0"], ["10.0f"]),
])
def test_loose_intersection(wanted, targets, expected):
    assert plan.loose_intersection(wanted, targets) == expected


def test_local_capabilities(monkeypatch):
    from kbuild.stages.torch_install import local_capabilities
    assert local_capabilities("9.0, 8.0,9.0", None) == ["9.0", "8.0"]
    assert local_capabilities("10.0f,9.0a,12.1", None) == ["10.0f", "9.0a", "12.1"]
    for bad in ("00.00", "99.99", "0.0", "09.0", "sm_90", "9", "9.0.1", ","):
        with pytest.raises(BuildError, match="not a CUDA capability") as info:
            local_capabilities(bad, None)
        assert str(info.value).startswith(f"--cuda-capabilities {bad!r}")
        assert "a one-digit minor" in info.value.hint


def test_cuda_capabilities_on_a_cpu_build_say_they_do_not_apply(tmp_path, monkeypatch):
    """A CPU variant built with --cuda-capabilities is an ordinary, publishable build: it is not
    marked, and nothing says "not publishable"; a CUDA one is both."""
    from kbuild.cli import build as build_cli
    from kbuild.stages import pipeline
    root = make_project(tmp_path, TORCH + kernel("k", "cuda", "csrc/k.cu")
                        + kernel("c", "cpu", "csrc/c.cpp"), files=BINDING + ("csrc/k.cu", "csrc/c.cpp"))
    warnings: list[str] = []
    built = []
    monkeypatch.setattr(build_cli, "warn", warnings.append)
    monkeypatch.setattr(pipeline, "read_torch_install", lambda *a, **k: fake_torch("2.13.0", cuda="13.0"))
    monkeypatch.setattr(plan, "find_cuda", lambda torch, *a, **k: fake_toolkit("13.0", ARCHS_130))
    result = pipeline.BuildResult("v", root, "_k", False, 0.0)
    monkeypatch.setattr(pipeline, "build_plan", lambda p, *a, **k: built.append(p) or result)
    monkeypatch.setattr(build_cli, "out", type("Quiet", (), {"print": lambda *a, **k: None})())
    build_cli.run_build(root, ["cpu"], None, local_capabilities="9.0")
    assert [p.local_capabilities for p in built] == [None]
    assert warnings == ["torch213-cxx11-cpu-x86_64-linux: --cuda-capabilities does not apply to a "
                        "variant without CUDA code; built as usual (publishable)"]
    warnings.clear()
    build_cli.run_build(root, ["cuda"], None, local_capabilities="9.0")
    assert built[-1].local_capabilities == ("9.0",)
    assert warnings == ["torch213-cxx11-cu130-x86_64-linux: a local build for CUDA capabilities "
                        "9.0 only: not publishable"]


def test_a_local_build_compiles_only_the_given_capabilities(tmp_path, monkeypatch):
    body = TORCH + kernel("k", "cuda", "csrc/k.cu", extra='cuda-capabilities = ["8.0", "9.0"]\n') \
        + kernel("d", "cuda", "csrc/d.cu")
    root = make_project(tmp_path, body, files=BINDING + ("csrc/k.cu", "csrc/d.cu"))
    p = local_plan(root, monkeypatch, ["9.0"])
    assert p.kernel_archs == {"k": ["9.0"], "d": ["9.0"]} and p.local_capabilities == ("9.0",)
    assert p.link_only == {} and p.capability_notes == ()
    # 7.5 runs `d` (no capabilities declared); `k` is compiled as PTX so the binding links
    p = local_plan(root, monkeypatch, ["7.5"])
    assert p.kernel_archs == {"d": ["7.5"]} and p.link_only == {"k": "8.0"}
    assert p.archs == ["7.5"]  # metadata claims what the GPU runs


def local_plan(root: Path, monkeypatch, local: list[str], toolkit: str = "13.0",
               archs: list[str] = ARCHS_130) -> plan.VariantPlan:
    monkeypatch.setattr(plan, "find_cuda", lambda torch, *a, **k: fake_toolkit(toolkit, archs))
    return plan.plan_variant(root, manifest.load(root), fake_torch("2.14.1", cuda=toolkit), "cuda",
                             local_capabilities=local)


# flash-mla's pattern: a Hopper and a Blackwell kernel sharing their host dispatch.
HOPPER_BLACKWELL = TORCH + kernel("fmla_sm90", "cuda", "csrc/api.cu", "csrc/sm90.cu",
                                  extra='cuda-capabilities = ["9.0a"]\n') \
    + kernel("fmla_sm100", "cuda", "csrc/api.cu", "csrc/sm100.cu",
             extra='cuda-capabilities = ["10.0f"]\n')
HOPPER_BLACKWELL_FILES = BINDING + ("csrc/api.cu", "csrc/sm90.cu", "csrc/sm100.cu")


def test_a_local_build_keeps_the_kernels_its_gpu_runs(tmp_path, monkeypatch):
    """A Hopper build compiles the Hopper kernel for 9.0a, the Blackwell kernel as PTX only
    (so the binding links), and says so in one line; metadata claims 9.0a alone."""
    root = make_project(tmp_path, HOPPER_BLACKWELL, files=HOPPER_BLACKWELL_FILES)
    p = local_plan(root, monkeypatch, ["9.0"])
    assert p.kernel_archs == {"fmla_sm90": ["9.0a"]} and p.link_only == {"fmla_sm100": "10.0f"}
    assert p.archs == ["9.0a"] and set(p.kernels) == {"fmla_sm90", "fmla_sm100"}
    (line,) = p.capability_notes
    assert line == ("kernel fmla_sm100: not compiled for 9.0 (it declares 10.0f); PTX for 10.0f "
                    "only, so that the binding links")
    assert local_plan(root, monkeypatch, ["9.0a"]).kernel_archs == {"fmla_sm90": ["9.0a"]}
    blackwell = local_plan(root, monkeypatch, ["10.0"])  # and the other way round
    assert blackwell.kernel_archs == {"fmla_sm100": ["10.0f"]}
    assert blackwell.link_only == {"fmla_sm90": "9.0a"}


def test_a_local_build_with_no_kernel_for_its_gpu_is_refused(tmp_path, monkeypatch):
    """msa's and nvfp4-gemm's pattern: every kernel is for sm100/sm120."""
    body = TORCH + kernel("a", "cuda", "csrc/a.cu", extra='cuda-capabilities = ["10.0a"]\n') \
        + kernel("b", "cuda", "csrc/b.cu", extra='cuda-capabilities = ["12.0f"]\n')
    root = make_project(tmp_path, body, files=BINDING + ("csrc/a.cu", "csrc/b.cu"))
    with pytest.raises(BuildError) as info:
        local_plan(root, monkeypatch, ["9.0"], archs=ARCHS_130 + ["12.0f"])
    assert info.value.message.startswith("no kernel runs on 9.0 (a: 10.0a; b: 12.0f)")
    assert info.value.key == "kernel.a.cuda-capabilities" and "\n" not in info.value.message


def test_a_local_build_needs_a_compilable_capability_for_each_kernel(tmp_path, monkeypatch):
    body = HOPPER_BLACKWELL.replace('"10.0f"', '"10.1a"')  # nvcc 13 has no sm_101
    root = make_project(tmp_path, body, files=HOPPER_BLACKWELL_FILES)
    with pytest.raises(BuildError) as info:
        local_plan(root, monkeypatch, ["9.0"])
    assert info.value.key == "kernel.fmla_sm100.cuda-capabilities"
    assert "cuda-minver" in info.value.hint


def test_a_release_build_names_the_capabilities_it_drops(tmp_path, monkeypatch):
    """As upstream, unmatched capabilities are dropped; the build says which and why."""
    body = TORCH + kernel("k", "cuda", "csrc/k.cu",
                          extra='cuda-capabilities = ["7.0", "8.0", "8.9", "10.1a", "11.8"]\n')
    root = make_project(tmp_path, body, files=BINDING + ("csrc/k.cu",))
    p = cuda_plan(root, monkeypatch, "13.0", ARCHS_130)
    assert p.kernel_archs == {"k": ["8.0", "8.9"]} and p.link_only == {}
    assert p.capability_notes == ("kernel k: 7.0 dropped: nvcc 13.0 cannot compile it; 10.1a "
                                  "dropped: nvcc 13.0 cannot compile it; 11.8 dropped: nvcc 13.0 "
                                  "cannot compile it",)
    # what a toolkit compiles but its targets do not reach
    body = TORCH + kernel("k", "cuda", "csrc/k.cu",
                          extra='cuda-capabilities = ["8.0", "8.6", "10.3a", "12.1"]\n')
    (root / "build.toml").write_text(make_project(tmp_path / "b", body).joinpath(
        "build.toml").read_text())
    p = cuda_plan(root, monkeypatch, "12.8", ARCHS_130 + ["10.3", "10.3a"])
    assert p.kernel_archs == {"k": ["8.0", "8.6"]}
    assert p.capability_notes == ("kernel k: 10.3a dropped: 10.3 is not one of the targets; "
                                  "12.1 dropped: no target of major 12 at or above it",)
    body = TORCH + kernel("k", "cuda", "csrc/k.cu", extra='cuda-capabilities = ["8.0", "8.6"]\n')
    (root / "build.toml").write_text(make_project(tmp_path / "c", body).joinpath(
        "build.toml").read_text())
    assert cuda_plan(root, monkeypatch, "13.0", ARCHS_130).capability_notes == ()


def test_a_release_build_keeps_10_3_and_12_1(tmp_path, monkeypatch):
    """Upstream's defaults from CUDA 12.9 on list 10.3 and 12.1: a kernel listing 10.3a keeps it."""
    body = TORCH + kernel("k", "cuda", "csrc/k.cu", extra='cuda-capabilities = ["10.3a", "12.1"]\n')
    root = make_project(tmp_path, body, files=BINDING + ("csrc/k.cu",))
    archs = ARCHS_130 + ["10.3", "10.3a"]
    p = cuda_plan(root, monkeypatch, "13.0", archs)
    assert p.kernel_archs == {"k": ["10.3a", "12.1"]} and p.capability_notes == ()
    assert "10.3" in plan.default_capabilities(Version("12.9"))
    assert plan.default_capabilities(Version("12.9"))[-1] == "12.1+PTX"
    assert "10.3" not in plan.default_capabilities(Version("12.8"))


def test_a_release_build_refuses_a_kernel_left_with_no_capability(tmp_path, monkeypatch):
    """Upstream errors on an empty intersection (authors bound such kernels with cuda-minver)."""
    body = TORCH + kernel("k", "cuda", "csrc/k.cu", extra='cuda-capabilities = ["10.0a"]\n')
    root = make_project(tmp_path, body, files=BINDING + ("csrc/k.cu",))
    with pytest.raises(BuildError) as info:
        cuda_plan(root, monkeypatch, "12.6", ARCHS_126)
    assert info.value.key == "kernel.k.cuda-capabilities" and "cuda-minver" in info.value.hint
