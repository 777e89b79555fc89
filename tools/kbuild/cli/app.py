"""The Typer app, the consoles and the entry point (errors become one line and exit 2)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from .. import __version__
from ..core.errors import BuildError
from ..core.layout import MANIFEST

HELP_MARKUP = None  # help texts name TOML tables ([dist], [torch-noarch]): never read as markup
app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  rich_markup_mode=HELP_MARKUP,
                  help="Build PyTorch kernels in the Hugging Face `kernels` format.")


def command_group(name: str, help: str) -> typer.Typer:
    """A `kbuild NAME ...` group of commands, its help shown as the app's."""
    group = typer.Typer(no_args_is_help=True, rich_markup_mode=HELP_MARKUP, help=help)
    app.add_typer(group, name=name)
    return group
# The one console set-up. Off a terminal (logs, CI) the width is $COLUMNS, else 160 columns.
LOG_WIDTH = 160


def _width(stderr: bool) -> int | None:
    if Console(stderr=stderr).is_terminal:
        return None
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else LOG_WIDTH


out = Console(width=_width(False))
err = Console(stderr=True, width=_width(True))


def log(msg: str) -> None:
    """A plain line on stdout (no markup, never wrapped)."""
    out.print(msg, highlight=False, markup=False, soft_wrap=True)


def note(msg: str) -> None:
    """A plain line on stderr: progress and remarks that are not the command's result."""
    err.print(msg, highlight=False, markup=False, soft_wrap=True)


def warn(msg: str) -> None:
    err.print("[yellow]warning:[/] ", end="", highlight=False)
    err.print(msg, highlight=False, markup=False, soft_wrap=True)


def error(msg: str) -> None:
    err.print("[red]error:[/] ", end="", highlight=False)
    err.print(msg, highlight=False, markup=False, soft_wrap=True)


def table(*headers: str, **kwargs) -> Table:
    """A table whose cells wrap, and fold words too long for their column, instead of cutting
    them (variant names and paths have no spaces)."""
    t = Table(**kwargs)
    for h in headers:
        t.add_column(h, overflow="fold")
    return t


def keep_whole(t: Table, column: int, console: Console) -> None:
    """Gives `column` the width of its longest cell (up to half the console), so names in it
    stay on one line where they can."""
    cells = [str(c) for c in t.columns[column].cells]
    longest = max((len(c) for c in cells), default=0)
    t.columns[column].min_width = min(longest, console.width // 2)


def find_project(path: Path) -> Path:
    """`path` or the nearest folder above it that holds a build.toml (like git finds .git)."""
    start = path.resolve()
    for folder in (start, *start.parents):
        if (folder / MANIFEST).is_file():
            if folder != start:
                note(f"project: {folder}")
            return folder
    if not start.exists():
        raise BuildError("no such directory", file=path,
                         hint="pass the directory of a kernel project")
    raise BuildError(f"no {MANIFEST} here or in any folder above", file=start,
                     hint="run the command inside a kernel project, pass its directory, or "
                          "create one with `kbuild init NAME`")


def version_text() -> str:
    from ..core.gitinfo import git_state

    text = f"kbuild {__version__} (pixi-kernel-builder)"
    state = git_state(Path(__file__).resolve().parent)
    if state:
        text += f", commit {state.commit[:12]}" + (" with uncommitted changes" if state.dirty else "")
    return text


def _version_callback(value: bool) -> None:
    if value:
        log(version_text())
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option(
        "--version", callback=_version_callback, is_eager=True,
        help="Print the version and exit.")] = False) -> None:
    """Build PyTorch kernels in the Hugging Face `kernels` format."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (e.g. from build-all stopping its builds): unwinds like Ctrl-C, so every stage
    cleans up (staging folders, a precompiled header being made, child process groups)."""


_TERMINATED: list[int] = []


def raise_terminated(signum, frame):
    _TERMINATED.append(signum)
    raise Terminated


def main() -> None:
    signal.signal(signal.SIGTERM, raise_terminated)
    try:
        app()
    except BuildError as e:
        error(str(e))
        sys.exit(2)
    except (Terminated, SystemExit):  # Typer ends an interrupt with exit 130
        if not _TERMINATED:
            raise
        err.print("terminated", highlight=False)
        sys.exit(128 + signal.SIGTERM)
    except KeyboardInterrupt:
        err.print("interrupted", highlight=False)
        sys.exit(130)
    except OSError as e:  # a tool or file the build needs could not be run or read
        error(f"{e.strerror or e}: {e.filename or ''}".rstrip(": "))
        sys.exit(2)


class StepDisplay:
    """Shows a build's steps (pipeline.Step) on stderr: one live line with a timer on a terminal;
    off a terminal, plain lines — a stage's start, Ninja's `[n/m] file` at most every
    PLAIN_EVERY seconds (and the last), and a `still …` line after HEARTBEAT silent seconds."""

    PLAIN_EVERY = 5.0
    HEARTBEAT = 15.0
    LABELS = {"environment": "environment:", "generate": "writing the build files",
              "configure": "configuring (CMake)", "compile": "compiling",
              "assemble": "assembling", "load": "checking that the extension loads",
              "loaded": "the extension loads (this very .so loaded before)",
              "install": "installing"}
    ANNOUNCED = ("configure", "compile", "load", "loaded")  # stages that get a plain line when they start

    def __init__(self, console: Console | None = None, live: bool | None = None) -> None:
        import threading
        import time

        self.console = console or err
        self.live = self.console.is_terminal if live is None else live
        self.clock = time.monotonic
        self.last_print = self.started = self.clock()
        self.stage = self.variant = self.text = ""
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.progress = None
        self.thread = None

    def __enter__(self) -> "StepDisplay":
        import threading

        if self.live:
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
            from rich.table import Column
            self.progress = Progress(
                SpinnerColumn(), TimeElapsedColumn(table_column=Column(min_width=7, no_wrap=True)),
                TextColumn("{task.description}", table_column=Column(
                    no_wrap=True, overflow="ellipsis", ratio=1)),
                console=self.console, transient=True, expand=True)
            self.progress.start()
            self.task = self.progress.add_task("starting", total=None)
        else:
            self.thread = threading.Thread(target=self._heartbeat, daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        if self.progress is not None:
            self.progress.stop()
        if self.thread is not None:
            self.thread.join(timeout=2)

    def __call__(self, step) -> None:
        what = self.LABELS.get(step.stage, step.stage)
        counted = f"[{step.done}/{step.total}] {step.detail}" if step.total else step.detail
        text = " ".join(p for p in (f"{step.variant}:" if step.variant else "", what, counted) if p)
        with self.lock:
            new_stage = step.stage != self.stage
            if new_stage:
                self.stage, self.started = step.stage, self.clock()
            self.variant, self.text = step.variant, what
            if self.progress is not None:
                self.progress.update(self.task, description=text)
                return
            now = self.clock()
            if step.total:  # Ninja's counter first, so build-all can read it from our log
                if step.done == step.total or now - self.last_print >= self.PLAIN_EVERY:
                    self._print(f"[{step.done}/{step.total}] {step.detail} ({step.variant})")
            elif new_stage and step.stage in self.ANNOUNCED:
                self._print(text)

    def output(self, variant: str, line: str) -> None:
        """--print-build-logs: a line of a build's own output, as nix -L shows it
        (`<variant>> <line>`), above the live line on a terminal."""
        with self.lock:
            self._print(f"{variant}> {line}")

    def _print(self, line: str) -> None:
        self.last_print = self.clock()
        self.console.print(line, highlight=False, markup=False, soft_wrap=True)

    def beat(self) -> None:
        """Off a terminal: a `still …` line when nothing was printed for HEARTBEAT seconds."""
        with self.lock:
            if self.text and self.clock() - self.last_print >= self.HEARTBEAT:
                who = f"{self.variant}: " if self.variant else ""
                self._print(f"{who}still {self.text} ({self.clock() - self.started:.0f}s)")

    def _heartbeat(self) -> None:
        while not self.stop.wait(1.0):
            self.beat()
