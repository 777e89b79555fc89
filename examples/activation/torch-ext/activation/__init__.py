"""Activation kernels that write into a caller-supplied `out` tensor.

gelu_fast / gelu_tanh: GELU, tanh approximation; gelu: exact (erf) GELU;
silu_and_mul: silu(x[..., :d]) * x[..., d:] with d = x.shape[-1] // 2.
float32, float16 and bfloat16; contiguous or strided inputs.
"""

import torch

from . import layers
from ._ops import add_op_namespace_prefix, ops

__all__ = ["gelu_fast", "gelu_tanh", "gelu", "silu_and_mul", "layers"]

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _fake(out: torch.Tensor, input: torch.Tensor) -> None:
    return None


for _name in ("gelu_fast", "gelu_tanh", "gelu", "silu_and_mul"):
    torch.library.register_fake(add_op_namespace_prefix(_name))(_fake)
del _name


def _check(name: str, out: torch.Tensor, x: torch.Tensor, gated: bool = False) -> None:
    for arg, t in (("x", x), ("out", out)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: {arg} must be a torch.Tensor, got {type(t).__name__}")
    shape = tuple(x.shape)
    if gated:
        if x.dim() == 0 or x.shape[-1] % 2:
            raise ValueError(f"{name}: the last dimension of x must be even, got shape {shape}")
        shape = (*shape[:-1], shape[-1] // 2)
    if x.dtype not in _DTYPES:
        raise TypeError(f"{name}: x must be float32, float16 or bfloat16, got {x.dtype}")
    if out.dtype != x.dtype:
        raise TypeError(f"{name}: out must have x's dtype {x.dtype}, got {out.dtype}")
    if out.device != x.device:
        raise ValueError(f"{name}: x is on {x.device} but out is on {out.device}")
    if tuple(out.shape) != shape:
        raise ValueError(f"{name}: out must have shape {shape}, got {tuple(out.shape)}")


def gelu_fast(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """GELU, tanh approximation (0.5x(1 + tanh(0.79788456x(1 + 0.044715x^2)))), into `out`."""
    _check("gelu_fast", out, x)
    ops.gelu_fast(out, x)
    return out


def gelu_tanh(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """GELU, tanh approximation, as F.gelu(x, approximate="tanh"), into `out`."""
    _check("gelu_tanh", out, x)
    ops.gelu_tanh(out, x)
    return out


def gelu(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Exact GELU, as F.gelu(x), into `out`."""
    _check("gelu", out, x)
    ops.gelu(out, x)
    return out


def silu_and_mul(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """F.silu(x[..., :d]) * x[..., d:] with d = x.shape[-1] // 2, into `out` (shape [..., d])."""
    _check("silu_and_mul", out, x, gated=True)
    ops.silu_and_mul(out, x)
    return out
