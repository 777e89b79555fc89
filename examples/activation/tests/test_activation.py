"""The activation kernel as a Hub user sees it: loaded with `kernels`, compared to PyTorch.

CPU tests run everywhere; `cuda` ones need a GPU. On CPU all three dtypes are tested
(PyTorch 2.x computes half-precision GELU/SiLU on CPU). Tolerances: rtol = atol = 1e-2 for
float16/bfloat16 (the issue's), 1e-5 for float32.
"""

import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn

HAS_CUDA = torch.cuda.is_available()
CUDA = [pytest.mark.cuda, pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")]
DEVICES = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=CUDA)]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
TOL = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 1e-2}

# name -> (reference, output shape from input shape)
REFERENCES = {
    "gelu_fast": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu": lambda x: F.gelu(x),
    "silu_and_mul": lambda x: F.silu(x[..., : x.shape[-1] // 2]) * x[..., x.shape[-1] // 2 :],
}
OPS = list(REFERENCES)


def out_shape(name, shape):
    return (*shape[:-1], shape[-1] // 2) if name == "silu_and_mul" else tuple(shape)


def check(activation, name, x, out=None):
    if out is None:
        out = torch.empty(out_shape(name, x.shape), dtype=x.dtype, device=x.device)
    result = getattr(activation, name)(out, x)
    assert result is out
    tol = TOL[x.dtype]
    torch.testing.assert_close(out, REFERENCES[name](x), rtol=tol, atol=tol)
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gelu_fast_4x4_seed42(activation, device, dtype):
    torch.manual_seed(42)
    x = torch.randn(4, 4, dtype=dtype, device=device)
    out = torch.empty_like(x)
    activation.gelu_fast(out, x)
    torch.testing.assert_close(out, F.gelu(x, approximate="tanh"), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("shape", [(1, 2), (4, 4), (3, 7, 66), (2, 17, 1024), (256, 4096)], ids=str)
def test_ops_match_pytorch(activation, name, shape, dtype, device):
    torch.manual_seed(42)
    check(activation, name, 3 * torch.randn(shape, dtype=dtype, device=device))


def strided_inputs(device, dtype):
    torch.manual_seed(42)
    base = torch.randn(24, 40, dtype=dtype, device=device)
    return {
        "transposed": base.t(),  # last dim not contiguous: the binding copies it
        "row_slice": base[:, :16],  # rows with stride 40
        "every_other_row": base[::2],
        "column_step": base[:, ::2],
        "offset_by_one": base.flatten()[1:321].view(20, 16),  # misaligned start
        "broadcast_rows": base[:1].expand(5, 40),  # row stride 0
        "3d_permuted": torch.randn(4, 6, 8, dtype=dtype, device=device).permute(1, 0, 2),
    }


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize(
    "case", ["transposed", "row_slice", "every_other_row", "column_step", "offset_by_one",
             "broadcast_rows", "3d_permuted"])
def test_strided_inputs(activation, name, case, dtype, device):
    x = strided_inputs(device, dtype)[case]
    assert not x.is_contiguous() or x.storage_offset() % 8 != 0
    check(activation, name, x)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", OPS)
def test_strided_outputs(activation, name, device):
    torch.manual_seed(42)
    x = torch.randn(12, 32, device=device)
    shape = out_shape(name, x.shape)
    wide = torch.zeros(shape[0], shape[1] + 8, device=device)
    out = wide[:, 3 : 3 + shape[1]]  # row-strided view
    check(activation, name, x, out)
    assert torch.all(wide[:, :3] == 0) and torch.all(wide[:, 3 + shape[1] :] == 0)
    outt = torch.empty(shape[::-1], device=device).t()  # not row-strided: temp + copy
    check(activation, name, x, outt)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["gelu_fast", "gelu_tanh", "gelu"])
def test_in_place(activation, name, device):
    torch.manual_seed(42)
    x = torch.randn(8, 64, device=device)
    expected = REFERENCES[name](x)
    getattr(activation, name)(x, x)
    torch.testing.assert_close(x, expected)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", OPS)
def test_empty(activation, name, device):
    x = torch.empty(0, 8, device=device)
    out = torch.empty(out_shape(name, x.shape), device=device)
    assert getattr(activation, name)(out, x) is out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", OPS)
def test_opcheck(activation, name, device):
    torch.manual_seed(42)
    x = torch.randn(4, 8, 32, device=device, dtype=torch.float16)
    out = torch.empty(out_shape(name, x.shape), device=device, dtype=x.dtype)
    torch.library.opcheck(getattr(activation.ops, name).default, (out, x))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", OPS)
def test_torch_compile_fullgraph(activation, name, device):
    fn = getattr(activation, name)

    def f(x):
        out = torch.empty(out_shape(name, x.shape), dtype=x.dtype, device=x.device)
        return fn(out, x * 2) + 1

    torch._dynamo.reset()
    torch.manual_seed(42)
    x = torch.randn(16, 64, device=device)
    compiled = torch.compile(f, fullgraph=True)
    torch.testing.assert_close(compiled(x), f(x))


def test_bad_arguments(activation):
    x = torch.randn(4, 8)
    with pytest.raises(TypeError, match="float32, float16 or bfloat16"):
        activation.gelu(torch.empty(4, 8, dtype=torch.float64), x.double())
    with pytest.raises(TypeError, match="out must have x's dtype"):
        activation.gelu_fast(torch.empty(4, 8, dtype=torch.float16), x)
    with pytest.raises(ValueError, match=r"out must have shape \[4, 8\]"):
        activation.gelu_tanh(torch.empty(4, 4), x)
    with pytest.raises(ValueError, match="last dimension of x must be even"):
        activation.silu_and_mul(torch.empty(4, 3), torch.randn(4, 7))
    with pytest.raises(ValueError, match=r"out must have shape \[4, 4\]"):
        activation.silu_and_mul(torch.empty(4, 8), x)
    with pytest.raises(ValueError, match="share memory"):
        activation.gelu(torch.empty(1, 8).expand(4, 8), x)
    with pytest.raises(RuntimeError, match="Expected a value of type 'Tensor'"):
        activation.gelu(torch.empty(2), [1.0, 2.0])
    with pytest.raises(TypeError, match="float32, float16 or bfloat16"):
        activation.ops.gelu_functional(torch.zeros(3, dtype=torch.int32))
    with pytest.raises(ValueError, match="last dimension of x must be even"):
        activation.ops.silu_and_mul_functional(torch.zeros(2, 3))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("shape", [(1, 2), (3, 7, 66), (256, 4096)], ids=str)
def test_functional_ops(activation, name, shape, dtype, device):
    torch.manual_seed(42)
    x = 3 * torch.randn(shape, dtype=dtype, device=device)
    y = getattr(activation.ops, f"{name}_functional")(x)
    assert y.shape == out_shape(name, shape) and y.dtype == dtype and y.is_contiguous()
    tol = TOL[dtype]
    torch.testing.assert_close(y, REFERENCES[name](x), rtol=tol, atol=tol)
    strided = x.transpose(0, -1) if x.dim() > 1 and name != "silu_and_mul" else x[..., :2]
    if name == "silu_and_mul":
        strided = torch.cat([x, x], -1)[..., : x.shape[-1]]  # row-strided
    torch.testing.assert_close(getattr(activation.ops, f"{name}_functional")(strided),
                               REFERENCES[name](strided), rtol=tol, atol=tol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", OPS)
def test_functional_opcheck_and_compile(activation, name, device):
    torch.manual_seed(42)
    op = getattr(activation.ops, f"{name}_functional").default
    x = torch.randn(4, 8, 32, device=device, dtype=torch.float16)
    torch.library.opcheck(op, (x,))

    def f(x):
        return op(x * 2) + 1

    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(f, fullgraph=True)(x), f(x))


LAYERS = {
    "SiluAndMul": REFERENCES["silu_and_mul"],
    "GeluFast": REFERENCES["gelu_fast"],
    "GeluTanh": REFERENCES["gelu_tanh"],
    "Gelu": REFERENCES["gelu"],
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layer", list(LAYERS))
def test_layers_follow_kernel_rules(activation, layer, device):
    cls = getattr(activation.layers, layer)
    assert issubclass(cls, nn.Module) and cls.__init__ is nn.Module.__init__
    extra = set(vars(cls)) - set(vars(nn.Module)) - {"__module__", "__doc__", "__qualname__",
                                                     "__annotations__", "__firstlineno__",
                                                     "__static_attributes__"}
    assert extra <= {"forward", "has_backward", "can_torch_compile"}
    torch.manual_seed(42)
    x = torch.randn(3, 5, 64, device=device)
    torch.testing.assert_close(cls()(x), LAYERS[layer](x))


@pytest.mark.parametrize("device", DEVICES)
def test_kernelize_replaces_forward(activation, activation_repo, device):
    from kernels import (LocalLayerRepository, Mode, kernelize, use_kernel_forward_from_hub,
                         use_kernel_mapping)

    @use_kernel_forward_from_hub("SiluAndMul")
    class SiluAndMul(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            d = x.shape[-1] // 2
            return F.silu(x[..., :d]) * x[..., d:]

    @use_kernel_forward_from_hub("GeluTanh")
    class GeluTanh(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.gelu(x, approximate="tanh")

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.up = nn.Linear(32, 128)
            self.act = SiluAndMul()
            self.gelu = GeluTanh()
            self.down = nn.Linear(64, 8)

        def forward(self, x):
            return self.down(self.gelu(self.act(self.up(x))))

    torch.manual_seed(42)
    model = MLP().to(device)
    x = torch.randn(4, 32, device=device)
    with torch.no_grad():
        expected = model(x)
    mapping = {name: {device: LocalLayerRepository(activation_repo, layer_name=name)}
               for name in ("SiluAndMul", "GeluTanh")}
    with use_kernel_mapping(mapping, inherit_mapping=False):
        kernelize(model, mode=Mode.INFERENCE, device=device)
    # The forwards now are the kernel's layers; the modules themselves are unchanged.
    assert model.act.forward.__func__ is activation.layers.SiluAndMul.forward
    assert model.gelu.forward.__func__ is activation.layers.GeluTanh.forward
    assert type(model.act) is SiluAndMul and type(model.gelu) is GeluTanh
    with torch.no_grad():
        torch.testing.assert_close(model(x), expected, rtol=1e-5, atol=1e-5)


def test_build_layout(activation, activation_repo):
    (variant,) = (activation_repo / "build").iterdir()
    meta = json.loads((variant / "metadata.json").read_text())
    assert meta["name"] == "activation" and meta["id"] == activation.__name__
    assert meta["id"].startswith("_activation_" + meta["backend"]["type"] + "_")
    assert (variant / f"{meta['id']}.abi3.so").is_file()
    assert {"__init__.py", "_ops.py", "layers.py"} <= {p.name for p in variant.iterdir()}
    assert activation.add_op_namespace_prefix("gelu") == f"{meta['id']}::gelu"


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", OPS)
def test_cuda_long_rows_and_tails(activation, name, dtype):
    # Rows of many blocks each, plus odd sizes that take the scalar path.
    torch.manual_seed(42)
    for shape in [(3, 2**22 + 2), (5, 1026), (7, 34)]:
        check(activation, name, torch.randn(shape, dtype=dtype, device="cuda"))
    torch.cuda.synchronize()


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", OPS)
def test_cuda_more_row_blocks_than_the_grid(activation, name, dtype):
    # 1.1M short rows (row-strided, so they stay rows): 16 rows per block gives more than the
    # 65535 row blocks a grid holds, so blocks loop over rows.
    torch.manual_seed(42)
    x = torch.randn(1_100_000, 32, dtype=dtype, device="cuda")[:, :16]
    check(activation, name, x)
    torch.cuda.synchronize()


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cuda_silu_and_mul_is_bit_identical_to_pytorch(activation, dtype):
    # PyTorch's formula and roundings: a model's outputs (and generated tokens) do not change.
    torch.manual_seed(42)
    x = 4 * torch.randn(512, 2 * 2048, dtype=dtype, device="cuda")
    d = x.shape[-1] // 2
    expected = F.silu(x[..., :d]) * x[..., d:]
    torch.testing.assert_close(activation.ops.silu_and_mul_functional(x), expected, rtol=0, atol=0)


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_cuda_matches_cpu_kernel(activation):
    torch.manual_seed(42)
    x = torch.randn(64, 512, dtype=torch.bfloat16)
    for name in OPS:
        shape = out_shape(name, x.shape)
        cpu = getattr(activation, name)(torch.empty(shape, dtype=x.dtype), x)
        gpu = getattr(activation, name)(torch.empty(shape, dtype=x.dtype, device="cuda"), x.cuda())
        torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-2, atol=1e-2)


def _load_benchmark_module():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "benchmark_activation.py"
    spec = importlib.util.spec_from_file_location("benchmark_activation", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_benchmark_smoke_cpu(activation, activation_repo, tmp_path):
    bench = _load_benchmark_module()
    device = "cuda" if torch.cuda.is_available() else "cpu"  # the variant built for this torch
    assert bench.main(["--variant-dir", str(activation_repo / "build"), "--device", device,
                       "--quick", "--no-compile", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "activation.json").read_text())
    ours = [r for r in result["rows"] if r["impl"] == "ours"]
    assert {r["group"] for r in ours} == set(OPS), {r["group"] for r in ours}
    assert all(r["ok"] and r["median_ms"] > 0 for r in ours)
    # The classes for `kernels benchmark` run too.
    for cls in (bench.SiluAndMulBenchmark, bench.GeluTanhBenchmark):
        b = cls()
        b.kernel, b.device = activation, "cpu"
        b.setup()
        (run,) = [getattr(b, n) for n in dir(b) if n.startswith("benchmark_")]
        (verify,) = [getattr(b, n) for n in dir(b) if n.startswith("verify_")]
        run()
        torch.testing.assert_close(b.out, verify(), rtol=1e-5, atol=1e-5)


def test_a_second_load_of_this_build_in_one_process(activation, activation_repo, tmp_path,
                                                     monkeypatch):
    """The same build loaded again from another folder in this process (a benchmark beside the
    tests does) registers no second fake kernel: torch before 2.13 refuses one, so registration
    is made as strict here."""
    import functools
    import inspect
    import shutil

    from kernels import get_local_kernel

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if "allow_override" in inspect.signature(torch.library.register_fake).parameters:
        monkeypatch.setattr(torch.library, "register_fake", functools.partial(
            torch.library.register_fake, allow_override=False))
    shutil.copytree(activation_repo / "build", tmp_path / "build")
    again = get_local_kernel(tmp_path, backend=device)
    assert again is not activation
    x = torch.randn(4, 64, device=device)
    first, second = torch.empty_like(x), torch.empty_like(x)
    torch.testing.assert_close(again.gelu_fast(second, x), activation.gelu_fast(first, x),
                               rtol=0, atol=0)
    torch.testing.assert_close(torch.compile(again.gelu_fast, fullgraph=True)(second, x), first,
                               rtol=0, atol=0)
