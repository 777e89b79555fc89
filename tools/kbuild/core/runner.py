"""The one way the builder runs other programs.

- `capture`: a short query (git, nvcc --version, an interpreter probe); output as text.
- `run_logged`: a long step (configure, compile, install) whose output goes to a log file;
  a failure becomes one BuildError with the log's tail and its path.
- `spawn_logged`: the same in its own process group, for callers that poll and may stop it.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
from pathlib import Path
from typing import Callable, Mapping

from .errors import BuildError


def capture(cmd: list[str], *, cwd: Path | str | None = None, input: str | None = None,
            timeout: float | None = None, env: Mapping[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    """Runs `cmd` and returns its result with stdout/stderr as text. A program that cannot be
    started gives returncode 127 and the OS error on stderr (never an exception)."""
    try:
        return subprocess.run(cmd, cwd=cwd, input=input, capture_output=True, text=True,
                              timeout=timeout, env=None if env is None else dict(env))
    except OSError as e:
        return subprocess.CompletedProcess(cmd, 127, "", f"{cmd[0]}: {e.strerror or e}")


def _header(cmd: list[str]) -> str:
    return "$ " + shlex.join(str(c) for c in cmd) + "\n"


def log_tail(log: Path, lines: int) -> list[str]:
    return log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]


def run_logged(cmd: list[str], log: Path, what: str, *, env: Mapping[str, str] | None = None,
               hint: str = "fix the error shown above", tail: int = 25,
               on_line: Callable[[str], None] | None = None) -> None:
    """Runs `cmd`, appending its output to `log`; raises BuildError (with the log's tail) on failure.
    `on_line` sees each output line as it comes (progress)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a", encoding="utf-8") as f:
        f.write(_header(cmd))
        f.flush()
        if on_line is None:
            code = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT,
                                  env=None if env is None else dict(env)).returncode
        else:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    env=None if env is None else dict(env), text=True,
                                    errors="replace", bufsize=1)
            assert proc.stdout is not None
            try:
                for line in proc.stdout:
                    f.write(line)
                    on_line(line.rstrip("\n"))
            finally:
                code = proc.wait()
    if code != 0:
        raise BuildError(f"{what} failed (exit {code}); full log: {log}\n    "
                         + "\n    ".join(log_tail(log, tail)), hint=hint)


def spawn_logged(cmd: list[str], log: Path, *, env: Mapping[str, str] | None = None
                 ) -> subprocess.Popen:
    """Starts `cmd` in a new process group with its output in `log` (overwritten)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w", encoding="utf-8") as f:
        f.write(_header(cmd))
        f.flush()
        return subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=None if env is None else dict(env), start_new_session=True)


def kill_group(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
