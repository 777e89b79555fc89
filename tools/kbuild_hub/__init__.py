"""A Hugging Face Hub-compatible HTTP server on 127.0.0.1, for offline and private CI.

The real `huggingface_hub` and `kernels` clients talk to it unchanged through `HF_ENDPOINT`.
Start it with `kbuild hub serve` (or `python -m kbuild_hub`).
"""

from .server import HubServer, main

__all__ = ["HubServer", "main"]
