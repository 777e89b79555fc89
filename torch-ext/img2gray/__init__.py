"""img2gray: RGB uint8 (H, W, 3) -> gray uint8 (H, W), gray = 0.21 R + 0.72 G + 0.07 B."""

import torch

from ._ops import add_op_namespace_prefix, ops

__all__ = ["img2gray", "img2gray_out"]


def _register_fake(name: str):
    """torch.library.register_fake, once per process: the same build loaded again (from another
    folder) shares this op namespace, and torch before 2.13 refuses a second fake kernel."""
    qualname = add_op_namespace_prefix(name)
    if torch._library.simple_registry.singleton.find(qualname).fake_impl.kernel is None:
        return torch.library.register_fake(qualname)
    return lambda fn: fn


@_register_fake("img2gray")
def _img2gray_fake(input: torch.Tensor, output: torch.Tensor) -> None:
    return None


def _check_input(image: torch.Tensor) -> None:
    if not isinstance(image, torch.Tensor):
        raise TypeError(f"img2gray expects a torch.Tensor, got {type(image).__name__}")
    if image.dtype != torch.uint8:
        raise TypeError(f"img2gray expects dtype torch.uint8, got {image.dtype}")
    if image.dim() != 3 or image.shape[-1] != 3:
        raise ValueError(
            f"img2gray expects an RGB image of shape (H, W, 3), got {tuple(image.shape)}"
        )
    if not image.is_contiguous():
        raise ValueError(
            "img2gray expects a contiguous (H, W, 3) tensor; call .contiguous() first"
        )


def img2gray_out(image: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Writes the grayscale of `image` into `out` (uint8, shape (H, W)) and returns it."""
    _check_input(image)
    if out.dtype != torch.uint8 or tuple(out.shape) != tuple(image.shape[:2]):
        raise ValueError(
            f"img2gray_out expects out of dtype uint8 and shape {tuple(image.shape[:2])}, "
            f"got {out.dtype} {tuple(out.shape)}"
        )
    ops.img2gray(image, out)
    return out


def img2gray(image: torch.Tensor) -> torch.Tensor:
    """Returns the grayscale of an RGB uint8 image of shape (H, W, 3) as uint8 (H, W)."""
    _check_input(image)
    out = torch.empty(image.shape[:2], dtype=torch.uint8, device=image.device)
    ops.img2gray(image, out)
    return out
