"""Layers for `kernels.kernelize` (stateless: no __init__, only forward and flags)."""

import torch
from torch import nn

from ._ops import ops


class SiluAndMul(nn.Module):
    """silu(x[..., :d]) * x[..., d:] with d = x.shape[-1] // 2."""

    can_torch_compile: bool = True
    has_backward: bool = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = x.shape[-1] // 2
        out = torch.empty(x.shape[:-1] + (d,), dtype=x.dtype, device=x.device)
        ops.silu_and_mul(out, x)
        return out


class GeluFast(nn.Module):
    """GELU, tanh approximation (the `gelu_fast` formulation)."""

    can_torch_compile: bool = True
    has_backward: bool = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        ops.gelu_fast(out, x)
        return out


class GeluTanh(nn.Module):
    """GELU, tanh approximation, as nn.GELU(approximate="tanh")."""

    can_torch_compile: bool = True
    has_backward: bool = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        ops.gelu_tanh(out, x)
        return out


class Gelu(nn.Module):
    """Exact GELU, as nn.GELU()."""

    can_torch_compile: bool = True
    has_backward: bool = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        ops.gelu(out, x)
        return out
