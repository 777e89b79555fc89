import torch


def img2gray_reference(image: torch.Tensor) -> torch.Tensor:
    """PyTorch reference: ((0.21 R + 0.72 G) + 0.07 B) in float32, truncated to uint8."""
    x = image.to(torch.float32)
    return (x[..., 0] * 0.21 + x[..., 1] * 0.72 + x[..., 2] * 0.07).to(torch.uint8)
