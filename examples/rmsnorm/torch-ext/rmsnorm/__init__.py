"""RMSNorm: compiled CUDA and CPU kernels behind one `torch.ops` operator.

y = weight * (x / sqrt(mean(x^2, -1) + eps)); the variance is computed in float32 and the
result has the input's dtype.
"""

import torch

from . import layers
from ._ops import add_op_namespace_prefix, ops
from .layers import rms_norm_reference

__all__ = ["rms_norm", "rms_norm_reference", "layers", "ops", "add_op_namespace_prefix"]

_rms_norm = ops.rms_norm.default


def _register_fake(name: str):
    """torch.library.register_fake, once per process: the same build loaded again (from another
    folder) shares this op namespace, and torch before 2.13 refuses a second fake kernel."""
    qualname = add_op_namespace_prefix(name)
    if torch._library.simple_registry.singleton.find(qualname).fake_impl.kernel is None:
        return torch.library.register_fake(qualname)
    return lambda fn: fn


@_register_fake("rms_norm")
def _rms_norm_fake(hidden_states: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    torch._check(weight.dim() == 1 and weight.shape[0] == hidden_states.shape[-1])
    return hidden_states.new_empty(hidden_states.shape)


def rms_norm(hidden_states: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMS-normalises the last dimension of `hidden_states` and scales it by `weight`.

    The variance is computed in float32; the result is contiguous and has `hidden_states`'
    dtype. The op checks its arguments (TypeError / ValueError).
    """
    return _rms_norm(hidden_states, weight, eps)
