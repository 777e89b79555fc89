"""Layers for `kernels.kernelize` (stateless: no __init__, only forward and flags)."""

import torch
from torch import nn

from ._custom_ops import rms_norm


class LlamaRMSNorm(nn.Module):
    """Drop-in forward for Llama-style RMSNorm modules (uses their `weight` and `variance_epsilon`)."""

    can_torch_compile: bool = True
    has_backward: bool = True

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return rms_norm(hidden_states, self.weight, self.variance_epsilon)
