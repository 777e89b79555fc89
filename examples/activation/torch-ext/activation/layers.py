"""Layers for `kernels.kernelize` (stateless: no __init__, only forward and flags).

Each forward is one call of a functional op, which allocates its output in C++.
"""

import torch
from torch import nn

from ._ops import ops

_silu_and_mul = ops.silu_and_mul_functional.default
_gelu_fast = ops.gelu_fast_functional.default
_gelu_tanh = ops.gelu_tanh_functional.default
_gelu = ops.gelu_functional.default


class SiluAndMul(nn.Module):
    """silu(x[..., :d]) * x[..., d:] with d = x.shape[-1] // 2."""

    can_torch_compile: bool = True
    has_backward: bool = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _silu_and_mul(x)


class GeluFast(nn.Module):
    """GELU, tanh approximation (the `gelu_fast` formulation)."""

    can_torch_compile: bool = True
    has_backward: bool = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _gelu_fast(x)


class GeluTanh(nn.Module):
    """GELU, tanh approximation, as nn.GELU(approximate="tanh")."""

    can_torch_compile: bool = True
    has_backward: bool = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _gelu_tanh(x)


class Gelu(nn.Module):
    """Exact GELU, as nn.GELU()."""

    can_torch_compile: bool = True
    has_backward: bool = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _gelu(x)
