"""The Typer app, the consoles and the entry point (errors become one line and exit 2)."""

from __future__ import annotations

import sys

import typer
from rich.console import Console

from ..core.errors import BuildError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Build PyTorch kernels in the Hugging Face `kernels` format.")
# The one console set-up. Off a terminal (logs, CI) tables get 160 columns instead of 80.
LOG_WIDTH = 160
out = Console(width=None if Console().is_terminal else LOG_WIDTH)
err = Console(stderr=True, width=None if Console(stderr=True).is_terminal else LOG_WIDTH)


def log(msg: str) -> None:
    """A plain line on stdout (no markup, never wrapped)."""
    out.print(msg, highlight=False, markup=False, soft_wrap=True)


def warn(msg: str) -> None:
    err.print("[yellow]warning:[/] ", end="", highlight=False)
    err.print(msg, highlight=False, markup=False, soft_wrap=True)


def error(msg: str) -> None:
    err.print("[red]error:[/] ", end="", highlight=False)
    err.print(msg, highlight=False, markup=False, soft_wrap=True)


def main() -> None:
    try:
        app()
    except BuildError as e:
        error(str(e))
        sys.exit(2)
    except KeyboardInterrupt:
        err.print("interrupted", highlight=False)
        sys.exit(130)
    except OSError as e:  # a tool or file the build needs could not be run or read
        error(f"{e.strerror or e}: {e.filename or ''}".rstrip(": "))
        sys.exit(2)
