"""Layers for `kernels.kernelize` (stateless: no __init__, only forward and flags)."""

import torch
from torch import nn

from ._ops import ops

_rms_norm = ops.rms_norm.default


def rms_norm_reference(hidden_states: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """PyTorch RMSNorm with the kernel's rounding: normalise in float32, round, scale, round."""
    dtype = hidden_states.dtype
    x = hidden_states.to(torch.promote_types(dtype, torch.float32))
    normed = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)).to(dtype)
    return (weight * normed).to(dtype)


class LlamaRMSNorm(nn.Module):
    """Drop-in forward for Llama-style RMSNorm modules (uses their `weight` and `variance_epsilon`).

    Eager: the compiled kernel. Under torch.compile: the same computation in PyTorch ops, which
    the compiler fuses with the neighbouring ops (an opaque kernel call cannot be fused).
    """

    can_torch_compile: bool = True
    has_backward: bool = True

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling():
            return rms_norm_reference(hidden_states, self.weight, self.variance_epsilon)
        return _rms_norm(hidden_states, self.weight, self.variance_epsilon)
