"""The rmsnorm kernel as a Hub user sees it: noarch variants, the op, the layer and `kernelize`.

CPU tests run everywhere (the PyTorch fallback of the `torch-cpu` variant); `cuda` tests
need a GPU and Triton. Tolerances: 1e-5 for float32, rtol = atol = 1e-2 for float16/bfloat16.
The reference model runs in float32 and bfloat16 on CPU (half-precision matmul is slow or
missing on CPU) and in float16 on CUDA.
"""

import copy
import json
import re
import subprocess
import sys

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from kernels import (LocalLayerRepository, Mode, kernelize, use_kernel_forward_from_hub,
                     use_kernel_mapping)

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
    with pytest.raises(TypeError, match="floating point"):
        rmsnorm.rms_norm(torch.ones(4, 8, dtype=torch.int32), torch.ones(8))
    with pytest.raises(TypeError, match="must be torch.Tensors"):
        rmsnorm.rms_norm(x, [1.0] * 8)


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


def test_noarch_variants_and_metadata(rmsnorm, rmsnorm_repo):
    from kernels._rust import Metadata

    build = rmsnorm_repo / "build"
    assert sorted(p.name for p in build.iterdir()) == ["torch-cpu", "torch-cuda"]
    uids = set()
    for backend in ("cpu", "cuda"):
        variant = build / f"torch-{backend}"
        meta = json.loads((variant / "metadata.json").read_text())
        Metadata.read_from_file(variant / "metadata.json")  # the loader accepts it
        assert meta["name"] == "rmsnorm" and meta["version"] == 1
        assert meta["backend"] == {"type": backend}  # no archs declared: Triton JITs
        m = re.fullmatch(rf"_rmsnorm_{backend}_(\w+)", meta["id"])
        assert m
        uids.add(m.group(1))
        assert not list(variant.rglob("*.so"))
        ops_py = (variant / "_ops.py").read_text()
        assert f"torch.ops.{meta['id']}" in ops_py and "from . import" not in ops_py
        files = {p.relative_to(variant).as_posix() for p in variant.rglob("*")
                 if p.is_file() and p.name != "metadata.json"}
        assert set(meta["digest"]["files"]) == files
        assert {"__init__.py", "_ops.py", "layers.py", "_triton_rms_norm.py"} <= files
    (uid,) = uids
    assert rmsnorm.__name__ in {f"_rmsnorm_{b}_{uid}" for b in ("cpu", "cuda")}


def test_cpu_variant_works_without_triton(rmsnorm_repo):
    code = f"""
import sys
sys.modules["triton"] = None  # as if Triton were not installed
from pathlib import Path
import torch
from kernels import get_local_kernel
k = get_local_kernel(Path({str(rmsnorm_repo)!r}), backend="cpu")
y = k.rms_norm(torch.ones(2, 8), torch.full((8,), 2.0), 1e-6)
assert torch.allclose(y, torch.full((2, 8), 2.0), atol=1e-5), y
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_cuda_uses_triton(rmsnorm):
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.rand(4096, device="cuda", dtype=torch.bfloat16)
    rmsnorm.rms_norm(x, w)  # compile outside the profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        rmsnorm.rms_norm(x, w)
        torch.cuda.synchronize()
    names = [e.name for e in prof.events()]
    assert any("_rms_norm_fwd" in n for n in names), names


def test_benchmark_smoke_cpu(rmsnorm, rmsnorm_repo, tmp_path):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "benchmark_rmsnorm.py"
    spec = importlib.util.spec_from_file_location("benchmark_rmsnorm", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--variant-dir", str(rmsnorm_repo / "build"), "--device", "cpu",
                       "--quick", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "rmsnorm.json").read_text())
    ours = [r for r in result["rows"] if r["impl"] == "ours"]
    assert ours and all(r["ok"] and r["median_ms"] > 0 for r in ours)
    b = bench.RMSNormBenchmark()
    b.kernel, b.device = rmsnorm, "cpu"
    b.setup()
    b.benchmark_rms_norm()
    torch.testing.assert_close(b.out, b.verify_rms_norm())


def test_noarch_declared_archs_reach_metadata(tmp_path):
    import shutil
    from pathlib import Path

    from kbuild.core.errors import BuildError
    from kbuild.build.pipeline import build

    project = tmp_path / "rmsnorm"
    src = Path(__file__).resolve().parents[1]
    shutil.copytree(src, project, ignore=shutil.ignore_patterns("build", ".kbuild", "__pycache__"))
    toml = (project / "build.toml").read_text()
    toml = toml.replace('backends = ["cpu", "cuda"]', 'backends = ["cpu", "cuda", "rocm"]')
    toml = toml.replace("[torch-noarch]", '[torch-noarch]\ncuda_capabilities = ["9.0", "8.0"]\n'
                                          'rocm-archs = ["gfx942", "gfx90a"]')
    (project / "build.toml").write_text(toml)
    results = build(project, build_dir=tmp_path / "out")
    backends = {r.variant: json.loads((r.path / "metadata.json").read_text())["backend"]
                for r in results}
    assert backends == {"torch-cpu": {"type": "cpu"},
                        "torch-cuda": {"type": "cuda", "archs": ["8.0", "9.0"]},
                        "torch-rocm": {"type": "rocm", "archs": ["gfx90a", "gfx942"]}}
    with pytest.raises(BuildError, match="not listed"):
        build(project, backends=["xpu"], build_dir=tmp_path / "out")
