"""The rmsnorm kernel as a Hub user sees it: the compiled op, the layer and `kernelize`.

CPU tests run everywhere (the CPU kernel, linked into every variant); `cuda` tests need a GPU.
Tolerances: 1e-5 for float32, rtol = atol = 1e-2 for float16/bfloat16.
The reference model runs in float32 and bfloat16 on CPU (half-precision matmul is slow or
missing on CPU) and in float16 on CUDA.
"""

import copy
import json
import re

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from kernels import (LocalLayerRepository, Mode, get_local_kernel, kernelize,
                     use_kernel_forward_from_hub, use_kernel_mapping)

HAS_CUDA = torch.cuda.is_available()
CUDA = [pytest.mark.cuda, pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")]
DEVICES = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=CUDA)]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
TOL = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 1e-2, torch.float64: 1e-7}


def llama_rms_norm(hidden_states, weight, eps):
    """transformers' LlamaRMSNorm.forward, cast back to the input dtype."""
    input_dtype = hidden_states.dtype
    hidden_states = hidden_states.to(torch.float32)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + eps)
    return (weight * hidden_states.to(input_dtype)).to(input_dtype)


@use_kernel_forward_from_hub("LlamaRMSNorm")
class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return llama_rms_norm(hidden_states, self.weight, self.variance_epsilon)


class ReferenceModel(nn.Module):
    """Linear(128 -> 256) -> RMSNorm -> GELU -> Linear(256 -> 10)."""

    def __init__(self):
        super().__init__()
        self.linear1 = nn.Linear(128, 256)
        self.norm = RMSNorm(256)
        self.activation = nn.GELU()
        self.linear2 = nn.Linear(256, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(self.activation(self.norm(self.linear1(x))))


class RecordOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def structure(model):
    return [(name, type(m)) for name, m in model.named_modules()], str(model)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(1, 8), (4, 4), (2, 7, 96), (32, 256), (3, 5000), (2, 8192)],
                         ids=str)
def test_rms_norm_matches_llama(rmsnorm, shape, dtype, device):
    torch.manual_seed(42)
    x = 3 * torch.randn(shape, dtype=dtype, device=device)
    w = torch.rand(shape[-1], dtype=dtype, device=device) + 0.5
    y = rmsnorm.rms_norm(x, w, 1e-6)
    assert y.dtype == dtype and y.shape == x.shape and y.device == x.device
    tol = TOL[dtype]
    torch.testing.assert_close(y, llama_rms_norm(x, w, 1e-6), rtol=tol, atol=tol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_output_in_input_dtype_with_float32_weight(rmsnorm, dtype, device):
    torch.manual_seed(42)
    x = torch.randn(8, 64, dtype=dtype, device=device)
    w = torch.rand(64, device=device)
    y = rmsnorm.rms_norm(x, w, 1e-5)
    assert y.dtype == dtype
    torch.testing.assert_close(y, llama_rms_norm(x, w, 1e-5), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", ["transposed", "row_slice", "permuted_3d", "broadcast_rows"])
def test_strided_inputs(rmsnorm, case, device):
    torch.manual_seed(42)
    base = torch.randn(48, 64, device=device)
    x = {"transposed": base.t(), "row_slice": base[:, 8:40],
         "permuted_3d": base.view(4, 12, 64).permute(1, 0, 2),
         "broadcast_rows": base[:1].expand(6, 64)}[case]
    w = torch.rand(x.shape[-1], device=device)
    y = rmsnorm.rms_norm(x, w, 1e-6)
    assert y.is_contiguous()
    torch.testing.assert_close(y, llama_rms_norm(x, w, 1e-6))


@pytest.mark.parametrize("device", DEVICES)
def test_empty_input(rmsnorm, device):
    x = torch.empty(0, 16, device=device)
    assert rmsnorm.rms_norm(x, torch.ones(16, device=device)).shape == (0, 16)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_opcheck(rmsnorm, dtype, device):
    torch.manual_seed(42)
    x = torch.randn(4, 8, 64, dtype=dtype, device=device)
    w = torch.rand(64, dtype=dtype, device=device)
    torch.library.opcheck(rmsnorm.ops.rms_norm.default, (x, w, 1e-6))
    assert rmsnorm.add_op_namespace_prefix("rms_norm") == f"{rmsnorm.__name__}::rms_norm"


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(rmsnorm, device):
    def f(x, w):
        return rmsnorm.rms_norm(x * 2, w, 1e-6) + 1

    torch._dynamo.reset()
    torch.manual_seed(42)
    x = torch.randn(16, 128, device=device)
    w = torch.rand(128, device=device)
    torch.testing.assert_close(torch.compile(f, fullgraph=True)(x, w), f(x, w))


def test_gradcheck_float64(rmsnorm):
    torch.manual_seed(42)
    x = torch.randn(3, 5, 16, dtype=torch.float64, requires_grad=True)
    w = torch.rand(16, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: rmsnorm.rms_norm(a, b, 1e-6), (x, w))


@pytest.mark.parametrize("device", DEVICES)
def test_backward_matches_autograd_of_reference(rmsnorm, device):
    torch.manual_seed(42)
    x = torch.randn(8, 96, device=device, requires_grad=True)
    w = torch.rand(96, device=device, requires_grad=True)
    grad = torch.randn(8, 96, device=device)
    dx, dw = torch.autograd.grad(rmsnorm.rms_norm(x, w, 1e-6), (x, w), grad)
    rx, rw = torch.autograd.grad(llama_rms_norm(x, w, 1e-6), (x, w), grad)
    torch.testing.assert_close(dx, rx, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(dw, rw, rtol=1e-4, atol=1e-4)


def test_bad_arguments(rmsnorm):
    x = torch.randn(4, 8)
    with pytest.raises(ValueError, match=r"weight must have shape \(8,\)"):
        rmsnorm.rms_norm(x, torch.ones(7))
    with pytest.raises(ValueError, match=r"weight must have shape \(8,\)"):
        rmsnorm.rms_norm(x, torch.ones(2, 8))
    with pytest.raises(TypeError, match="floating point"):
        rmsnorm.rms_norm(torch.ones(4, 8, dtype=torch.int32), torch.ones(8))
    with pytest.raises(RuntimeError, match="Expected a value of type 'Tensor'"):
        rmsnorm.rms_norm(x, [1.0] * 8)


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_weight_on_another_device(rmsnorm):
    with pytest.raises(ValueError, match="weight is on cpu"):
        rmsnorm.rms_norm(torch.randn(4, 8, device="cuda"), torch.ones(8))


def test_layer_follows_kernel_rules(rmsnorm):
    cls = rmsnorm.layers.LlamaRMSNorm
    assert issubclass(cls, nn.Module) and cls.__init__ is nn.Module.__init__
    extra = set(vars(cls)) - set(vars(nn.Module)) - {"__module__", "__doc__", "__qualname__",
                                                     "__annotations__", "__firstlineno__",
                                                     "__static_attributes__"}
    assert extra <= {"forward", "has_backward", "can_torch_compile"}


@pytest.mark.parametrize(
    "device,dtype",
    [("cpu", torch.float32), ("cpu", torch.bfloat16),
     pytest.param("cuda", torch.float16, marks=CUDA)], ids=str)
@pytest.mark.parametrize("weights", ["ones", "random"])
def test_reference_model_kernelized(rmsnorm, rmsnorm_repo, device, dtype, weights):
    torch.manual_seed(42)
    model = ReferenceModel()
    if weights == "ones":  # the model: weights 1, biases 0
        with torch.no_grad():
            for m in (model.linear1, model.linear2):
                m.weight.fill_(1)
                m.bias.zero_()
            model.norm.weight.fill_(1)
    else:
        with torch.no_grad():
            model.norm.weight.uniform_(0.5, 1.5)
    model = model.to(device=device, dtype=dtype).eval()
    reference = copy.deepcopy(model)
    before = structure(model)
    x = torch.randn(32, 128, device=device, dtype=dtype)

    mapping = {"LlamaRMSNorm": {device: LocalLayerRepository(rmsnorm_repo, layer_name="LlamaRMSNorm")}}
    with use_kernel_mapping(mapping, inherit_mapping=False):
        kernelize(model, mode=Mode.INFERENCE, device=device)

    assert structure(model) == before
    assert model.norm.forward.__func__ is rmsnorm.layers.LlamaRMSNorm.forward
    with torch.no_grad(), RecordOps() as rec:
        y = model(x)
    assert f"{rmsnorm.__name__}.rms_norm.default" in rec.ops
    with torch.no_grad():
        expected = reference(x)
    tol = TOL[dtype]
    torch.testing.assert_close(y, expected, rtol=tol, atol=tol)


def test_no_mapping_keeps_forward_and_function_still_works(rmsnorm):
    torch.manual_seed(42)
    model = ReferenceModel().eval()
    with use_kernel_mapping({}, inherit_mapping=False):
        kernelize(model, mode=Mode.INFERENCE, device="cpu")
    assert model.norm.forward.__func__ is RMSNorm.forward
    # Without a mapped layer, call the kernel function directly.
    hidden_states = torch.randn(32, 256)
    out = rmsnorm.rms_norm(hidden_states, model.norm.weight, model.norm.variance_epsilon)
    with torch.no_grad():
        torch.testing.assert_close(out, model.norm(hidden_states))


def test_build_layout(rmsnorm, rmsnorm_repo):
    from kernels._rust import Metadata

    (variant,) = (rmsnorm_repo / "build").iterdir()
    meta = json.loads((variant / "metadata.json").read_text())
    Metadata.read_from_file(variant / "metadata.json")  # the loader accepts it
    assert meta["name"] == "rmsnorm" and meta["version"] == 1 and meta["id"] == rmsnorm.__name__
    assert re.fullmatch(rf"_rmsnorm_{meta['backend']['type']}_\w+", meta["id"])
    assert (variant / f"{meta['id']}.abi3.so").is_file()
    assert {"__init__.py", "_ops.py", "layers.py"} <= {p.name for p in variant.iterdir()}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_weight_of_another_float_type(rmsnorm, dtype, device):
    torch.manual_seed(42)
    x = 2 * torch.randn(6, 512, dtype=dtype, device=device)
    other = torch.bfloat16 if dtype == torch.float16 else torch.float16
    w = (torch.rand(512, device=device) + 0.5).to(other)
    torch.testing.assert_close(rmsnorm.rms_norm(x, w, 1e-6),
                               rmsnorm.rms_norm_reference(x, w, 1e-6), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("device", DEVICES)
def test_matches_reference_rounding(rmsnorm, device):
    # The kernel rounds as LlamaRMSNorm does: only the float32 sum's order may differ.
    torch.manual_seed(42)
    x = 3 * torch.randn(64, 2048, dtype=torch.bfloat16, device=device)
    w = (torch.rand(2048, device=device) + 0.5).to(torch.bfloat16)
    y = rmsnorm.rms_norm(x, w, 1e-6)
    ref = llama_rms_norm(x, w, 1e-6)
    rel = (y.float() - ref.float()).abs() / ref.float().abs().clamp_min(1e-30)
    assert float(rel.max()) <= 2 ** -6  # two bfloat16 ulps at most
    assert float((y != ref).float().mean()) < 1e-3


@pytest.mark.parametrize("device", DEVICES)
def test_layer_under_torch_compile(rmsnorm, rmsnorm_repo, device):
    torch._dynamo.reset()
    torch.manual_seed(42)
    model = ReferenceModel().to(device).eval()
    mapping = {"LlamaRMSNorm": {device: LocalLayerRepository(rmsnorm_repo, layer_name="LlamaRMSNorm")}}
    with use_kernel_mapping(mapping, inherit_mapping=False):
        kernelize(model, mode=Mode.INFERENCE | Mode.TORCH_COMPILE, device=device)
    x = torch.randn(8, 128, device=device)
    with torch.no_grad():
        eager = model(x)
        compiled = torch.compile(model, fullgraph=True)(x)
    torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-5)


def test_noarch_declared_archs_reach_metadata(tmp_path):
    # A builder check that needs a noarch project: a minimal one, made here.
    from kbuild.stages.pipeline import build
    from kbuild.core.errors import BuildError

    project = tmp_path / "tiny"
    (project / "torch-ext" / "tiny").mkdir(parents=True)
    (project / "torch-ext" / "tiny" / "__init__.py").write_text("from ._ops import ops\n")
    (project / "build.toml").write_text(
        '[general]\nname = "tiny"\nversion = 1\nedition = 5\nlicense = "apache-2.0"\n'
        'backends = ["cpu", "cuda", "rocm"]\n\n[torch-noarch]\n'
        'cuda_capabilities = ["9.0", "8.0"]\nrocm-archs = ["gfx942", "gfx90a"]\n')
    results = build(project, build_dir=tmp_path / "out")
    backends = {r.variant: json.loads((r.path / "metadata.json").read_text())["backend"]
                for r in results}
    assert backends == {"torch-cpu": {"type": "cpu"},
                        "torch-cuda": {"type": "cuda", "archs": ["8.0", "9.0"]},
                        "torch-rocm": {"type": "rocm", "archs": ["gfx90a", "gfx942"]}}
    with pytest.raises(BuildError, match="not listed"):
        build(project, backends=["xpu"], build_dir=tmp_path / "out")


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_cuda_uses_compiled_kernel(rmsnorm):
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.rand(4096, device="cuda", dtype=torch.bfloat16)
    rmsnorm.rms_norm(x, w)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        rmsnorm.rms_norm(x, w)
        torch.cuda.synchronize()
    names = [e.name for e in prof.events()]
    assert any("rms_norm_rows" in n for n in names), names


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("hidden", [8, 96, 1024, 2048, 4096, 8192, 16384, 32768, 40000, 4100],
                         ids=str)
def test_cuda_launch_paths_match_cpu_kernel(rmsnorm, dtype, hidden):
    # Every launch path: rows of 1..8 packs per thread, the two-pass kernel (long rows, and
    # rows that are not whole 16-byte packs), several rows per block for short rows.
    torch.manual_seed(42)
    rows = max(1, min(300, (1 << 21) // hidden))
    x = 3 * torch.randn(rows, hidden, dtype=dtype)
    w = (torch.rand(hidden) + 0.5).to(dtype)
    cpu = rmsnorm.rms_norm(x, w, 1e-6)
    gpu = rmsnorm.rms_norm(x.cuda(), w.cuda(), 1e-6).cpu()
    tol = TOL[dtype]
    torch.testing.assert_close(gpu, cpu, rtol=tol, atol=tol)
    torch.testing.assert_close(gpu, llama_rms_norm(x, w, 1e-6), rtol=tol, atol=tol)


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_cuda_graph_capture(rmsnorm):
    x = torch.randn(8, 2048, device="cuda", dtype=torch.bfloat16)
    w = torch.rand(2048, device="cuda", dtype=torch.bfloat16)
    expected = rmsnorm.rms_norm(x, w)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = rmsnorm.rms_norm(x, w)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(y, expected, rtol=0, atol=0)


def test_benchmark_smoke_cpu(rmsnorm_cpu_repo, tmp_path):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "benchmark_rmsnorm.py"
    spec = importlib.util.spec_from_file_location("benchmark_rmsnorm", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--variant-dir", str(rmsnorm_cpu_repo / "build"), "--device", "cpu",
                       "--quick", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "rmsnorm.json").read_text())
    ours = [r for r in result["rows"] if r["impl"] == "ours"]
    assert ours and all(r["ok"] and r["median_ms"] > 0 for r in ours)
    b = bench.RMSNormBenchmark()
    b.kernel, b.device = get_local_kernel(rmsnorm_cpu_repo, backend="cpu"), "cpu"
    b.setup()
    b.benchmark_rms_norm()
    torch.testing.assert_close(b.out, b.verify_rms_norm())


def test_a_second_load_of_this_build_in_one_process(rmsnorm, rmsnorm_repo, tmp_path, monkeypatch):
    """The same build loaded again from another folder in this process (the end-to-end script
    beside the tests does) registers no second fake kernel: torch before 2.13 refuses one, so
    registration is made as strict here."""
    import functools
    import inspect
    import shutil

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if "allow_override" in inspect.signature(torch.library.register_fake).parameters:
        monkeypatch.setattr(torch.library, "register_fake", functools.partial(
            torch.library.register_fake, allow_override=False))
    shutil.copytree(rmsnorm_repo / "build", tmp_path / "build")
    again = get_local_kernel(tmp_path, backend=device)
    assert again is not rmsnorm
    x, w = torch.randn(3, 128, device=device), torch.randn(128, device=device)
    torch.testing.assert_close(again.rms_norm(x, w, 1e-6), rmsnorm.rms_norm(x, w, 1e-6),
                               rtol=0, atol=0)
    torch.testing.assert_close(torch.compile(again.rms_norm, fullgraph=True)(x, w, 1e-6),
                               rmsnorm.rms_norm(x, w, 1e-6), rtol=0, atol=0)
