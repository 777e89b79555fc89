"""pixi-kernel-builder: build PyTorch kernels in the Hugging Face `kernels` format."""

__version__ = "0.1.0"
