"""The `rms_norm` op: a torch.library custom op with fake, CUDA (Triton) and autograd impls."""

import torch

from ._ops import add_op_namespace_prefix

_TRITON_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    # float32, or float64 for float64 inputs.
    return torch.promote_types(dtype, torch.float32)


def rms_norm_reference(hidden_states: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """PyTorch RMSNorm with the kernel's rounding: normalise in float32, round, scale, round."""
    dtype = hidden_states.dtype
    x = hidden_states.to(_compute_dtype(dtype))
    variance = x.pow(2).mean(-1, keepdim=True)
    normed = (x * torch.rsqrt(variance + eps)).to(dtype)
    return (weight * normed).to(dtype).contiguous()


@torch.library.custom_op(add_op_namespace_prefix("rms_norm"), mutates_args=())
def _rms_norm(hidden_states: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # Default (CPU and any other device): PyTorch.
    return rms_norm_reference(hidden_states, weight, eps)


@_rms_norm.register_kernel("cuda")
def _rms_norm_cuda(hidden_states: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    if hidden_states.dtype not in _TRITON_DTYPES:
        return rms_norm_reference(hidden_states, weight, eps)
    from ._triton_rms_norm import rms_norm_triton  # Triton is only needed here

    return rms_norm_triton(hidden_states, weight, eps)


@_rms_norm.register_fake
def _rms_norm_fake(hidden_states: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.empty(hidden_states.shape, dtype=hidden_states.dtype, device=hidden_states.device)


def _setup_context(ctx, inputs, output) -> None:
    hidden_states, weight, eps = inputs
    ctx.save_for_backward(hidden_states, weight)
    ctx.eps = eps


def _backward(ctx, grad: torch.Tensor):
    # In float32, ignoring the intermediate rounding of the forward.
    x, weight = ctx.saved_tensors
    compute = _compute_dtype(x.dtype)
    xf = x.to(compute)
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + ctx.eps)
    x_hat = xf * rstd
    g = grad.to(compute)
    gw = g * weight.to(compute)
    dx = rstd * (gw - x_hat * (gw * x_hat).mean(-1, keepdim=True))
    dw = (g * x_hat).reshape(-1, x.shape[-1]).sum(0)
    return dx.to(x.dtype), dw.to(weight.dtype), None


_rms_norm.register_autograd(_backward, setup_context=_setup_context)


def rms_norm(hidden_states: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMS-normalises the last dimension of `hidden_states` and scales it by `weight`.

    The variance is computed in float32; the result has `hidden_states`' dtype.
    """
    if not isinstance(hidden_states, torch.Tensor) or not isinstance(weight, torch.Tensor):
        raise TypeError("rms_norm: hidden_states and weight must be torch.Tensors")
    if not hidden_states.is_floating_point():
        raise TypeError(f"rms_norm: hidden_states must be floating point, got {hidden_states.dtype}")
    if hidden_states.dim() == 0 or tuple(weight.shape) != (hidden_states.shape[-1],):
        raise ValueError(
            f"rms_norm: weight must have shape ({hidden_states.shape[-1] if hidden_states.dim() else '?'},) "
            f"to match the last dimension of hidden_states {tuple(hidden_states.shape)}, "
            f"got {tuple(weight.shape)}"
        )
    if weight.device != hidden_states.device:
        raise ValueError(
            f"rms_norm: hidden_states is on {hidden_states.device} but weight is on {weight.device}"
        )
    return _rms_norm(hidden_states, weight, float(eps))
