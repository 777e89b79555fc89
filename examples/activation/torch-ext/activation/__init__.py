"""Activation kernels that write into a caller-supplied `out` tensor.

gelu_fast / gelu_tanh: GELU, tanh approximation; gelu: exact (erf) GELU;
silu_and_mul: silu(x[..., :d]) * x[..., d:] with d = x.shape[-1] // 2.
float32, float16 and bfloat16; contiguous or strided inputs. The ops check their arguments
(TypeError / ValueError); `ops.<name>_functional(x)` returns a new tensor instead.
"""

import torch

from . import layers
from ._ops import add_op_namespace_prefix, ops

__all__ = ["gelu_fast", "gelu_tanh", "gelu", "silu_and_mul", "layers"]


def _register_fake(name: str):
    """torch.library.register_fake, once per process: the same build loaded again (from another
    folder) shares this op namespace, and torch before 2.13 refuses a second fake kernel."""
    qualname = add_op_namespace_prefix(name)
    if torch._library.simple_registry.singleton.find(qualname).fake_impl.kernel is None:
        return torch.library.register_fake(qualname)
    return lambda fn: fn


def _fake_out(out: torch.Tensor, input: torch.Tensor) -> None:
    return None


def _fake_functional(input: torch.Tensor) -> torch.Tensor:
    return input.new_empty(input.shape)


def _fake_gated(input: torch.Tensor) -> torch.Tensor:
    return input.new_empty((*input.shape[:-1], input.shape[-1] // 2))


for _name in ("gelu_fast", "gelu_tanh", "gelu", "silu_and_mul"):
    _register_fake(_name)(_fake_out)
    _register_fake(f"{_name}_functional")(
        _fake_gated if _name == "silu_and_mul" else _fake_functional)
del _name

_gelu_fast = ops.gelu_fast.default
_gelu_tanh = ops.gelu_tanh.default
_gelu = ops.gelu.default
_silu_and_mul = ops.silu_and_mul.default


def gelu_fast(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """GELU, tanh approximation (0.5x(1 + tanh(0.79788456x(1 + 0.044715x^2)))), into `out`."""
    _gelu_fast(out, x)
    return out


def gelu_tanh(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """GELU, tanh approximation, as F.gelu(x, approximate="tanh"), into `out`."""
    _gelu_tanh(out, x)
    return out


def gelu(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Exact GELU, as F.gelu(x), into `out`."""
    _gelu(out, x)
    return out


def silu_and_mul(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """F.silu(x[..., :d]) * x[..., d:] with d = x.shape[-1] // 2, into `out` (shape [..., d])."""
    _silu_and_mul(out, x)
    return out
