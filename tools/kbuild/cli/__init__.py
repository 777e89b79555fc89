"""The `kbuild` command line: a thin layer over the pipeline stages, one module per group."""

from . import init, build, matrix, signing, publish, bench, hub, ci  # noqa: F401,I001  (each adds its commands, in this order)
from .app import app, main

__all__ = ["app", "main"]
