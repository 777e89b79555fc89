"""RMSNorm: Triton kernel on CUDA, PyTorch fallback elsewhere.

y = weight * (x / sqrt(mean(x^2, -1) + eps)); the variance is computed in
float32 and the result has the input's dtype.
"""

from . import layers
from ._custom_ops import rms_norm, rms_norm_reference
from ._ops import add_op_namespace_prefix, ops

__all__ = ["rms_norm", "rms_norm_reference", "layers", "ops", "add_op_namespace_prefix"]
