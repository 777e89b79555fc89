"""x * s on a Hopper kernel or a Blackwell kernel, chosen by the device."""

import torch

from ._ops import ops

__all__ = ["scale", "scale_blackwell"]


def scale(x: torch.Tensor, s: float) -> torch.Tensor:
    out = torch.empty_like(x)
    ops.scale_out(x, s, out)
    return out


def scale_blackwell(x: torch.Tensor, s: float) -> torch.Tensor:
    out = torch.empty_like(x)
    ops.scale_blackwell_out(x, s, out)
    return out
