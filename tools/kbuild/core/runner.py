"""The one way the builder runs other programs.

- `capture`: a short query (git, nvcc --version, an interpreter probe); output as text.
- `run_logged`: a long step (configure, compile, install) whose output goes to a log file;
  a failure becomes one BuildError with the log's tail and its path. It runs in a process group
  of its own, ended (and waited for) when this process is interrupted or terminated.
- `spawn_logged`: the same in its own process group, for callers that poll and may stop it
  (`stop` ends such groups).
- `stream`: a program whose output the caller shows line by line as it comes (a test run).
- `call`: a program that shares this terminal (interactive, or whose output is the result).
- `Worker`: a long-lived program asked one line at a time (saves its start-up per question).
- `marked_answer`: the answer line of a script run in a target interpreter.
"""

from __future__ import annotations

import json
import os
import queue
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Mapping

from .errors import BuildError

Process = subprocess.Popen
Timeout = subprocess.TimeoutExpired  # what `capture(timeout=...)` raises when the time is up


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


def marked_answer(stdout: str, marker: str) -> dict | None:
    """The JSON object on the last line of a program's output that starts with `marker` (how
    the scripts run in a target interpreter answer); None when there is none, or it is not an
    object. Whatever else the program printed is never taken for the answer."""
    lines = [line for line in stdout.splitlines() if line.startswith(marker)]
    try:
        answer = json.loads(lines[-1][len(marker):]) if lines else None
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None


def _header(cmd: list[str]) -> str:
    return "$ " + shlex.join(str(c) for c in cmd) + "\n"


def log_tail(log: Path, lines: int) -> list[str]:
    return log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]


def run_logged(cmd: list[str], log: Path, what: str, *, env: Mapping[str, str] | None = None,
               hint: str = "fix the error shown above", tail: int = 25,
               on_line: Callable[[str], None] | None = None) -> None:
    """Runs `cmd`, appending its output to `log`; raises BuildError (with the log's tail) on failure.
    `on_line` sees each output line as it comes (progress). It runs in a process group of its
    own: interrupted or terminated, this process ends that group (a build's Ninja passes the
    signal on to its compilers) and waits until none of it is left."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a", encoding="utf-8") as f:
        f.write(_header(cmd))
        f.flush()
        piped = on_line is not None
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE if piped else f,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=None if env is None else dict(env), text=True,
                                errors="replace", bufsize=1, start_new_session=True)
        try:
            if piped:
                assert proc.stdout is not None and on_line is not None
                for line in proc.stdout:
                    f.write(line)
                    on_line(line.rstrip("\n"))
            code = proc.wait()
        except BaseException:  # interrupted or terminated: what it started ends with it
            stop([proc])
            raise
        finally:
            if proc.stdout:
                proc.stdout.close()
    if code != 0:
        raise BuildError(f"{what} failed (exit {code}); full log: {log}\n    "
                         + "\n    ".join(log_tail(log, tail)), hint=hint)


def spawn_logged(cmd: list[str], log: Path, *, env: Mapping[str, str] | None = None,
                 cwd: Path | str | None = None) -> subprocess.Popen:
    """Starts `cmd` in a new process group with its output in `log` (overwritten)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w", encoding="utf-8") as f:
        f.write(_header(cmd))
        f.flush()
        return subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=None if env is None else dict(env), cwd=cwd,
                                start_new_session=True)


def kill_group(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_left(proc: subprocess.Popen) -> bool:
    """Whether a process of the group `proc` leads is still running (once `proc` is reaped)."""
    try:
        os.killpg(proc.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def stop(procs: list[subprocess.Popen], grace: float = 10.0) -> None:
    """Ends the process groups of `procs`: SIGTERM, then SIGKILL for those still running after
    `grace` seconds; returns once no process of them is left (the leader may end first: its
    group can still hold a Ninja that stops its compilers)."""
    for p in procs:
        kill_group(p, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            kill_group(p, signal.SIGKILL)
            p.wait()
    for p in procs:
        killed = False
        while _group_left(p):
            if time.monotonic() > deadline:
                if killed:
                    break  # (a process of another user in it: nothing more to do)
                kill_group(p, signal.SIGKILL)
                killed, deadline = True, time.monotonic() + grace
            time.sleep(0.02)


def stream(cmd: list[str], on_line: Callable[[str], None], *, cwd: Path | str | None = None,
           env: Mapping[str, str] | None = None, lets_child_stop: bool = False) -> int:
    """Runs `cmd` with stdout and stderr merged, handing each line (with its newline) to
    `on_line` as it comes; returns the exit status (127 when it cannot be started).
    `lets_child_stop`: on Ctrl-C (which the child, in the same process group, gets too) keep
    showing its output until it has stopped itself (pytest prints what ran) and return its
    status."""
    try:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env=None if env is None else dict(env), text=True,
                                errors="replace", bufsize=1)
    except OSError as e:
        on_line(f"{cmd[0]}: {e.strerror or e}\n")
        return 127
    assert proc.stdout is not None
    try:
        while True:
            try:
                for line in proc.stdout:
                    on_line(line)
                break
            except KeyboardInterrupt:
                if not lets_child_stop:
                    raise
    finally:
        code = proc.wait()
    return code


def call(cmd: list[str], *, cwd: Path | str | None = None,
         env: Mapping[str, str] | None = None) -> int:
    """Runs `cmd` on this terminal (its output is the user's to see); returns the exit status."""
    try:
        return subprocess.call(cmd, cwd=cwd, env=None if env is None else dict(env))
    except OSError as e:
        print(f"{cmd[0]}: {e.strerror or e}", file=sys.stderr)
        return 127


class Worker:
    """A long-lived program that answers each line written to its stdin with one line on stdout
    that starts with `marker` (its other output is skipped; stderr goes to a temporary file).
    A thread reads its answers, so a question can have a time limit (`ask(..., timeout=)`)."""

    def __init__(self, cmd: list[str], marker: str, *, env: Mapping[str, str] | None = None):
        self.marker = marker
        self.timed_out = False
        self.stderr = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, text=True, errors="replace", bufsize=1,
                                     env=None if env is None else dict(env))
        self.answers: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        """Queues each answer, then None at the end of its output (which this thread closes)."""
        stdout = self.proc.stdout
        assert stdout is not None
        try:
            for out in stdout:
                if out.startswith(self.marker):
                    self.answers.put(out[len(self.marker):].rstrip("\n"))
        except (OSError, ValueError):
            pass
        finally:
            stdout.close()
            self.answers.put(None)

    def ask(self, line: str, timeout: float | None = None) -> str | None:
        """The answer (after the marker), or None when the program has ended (see `errors`) or
        has not answered within `timeout` seconds (then `timed_out` is set and it is killed)."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            return None
        try:
            return self.answers.get(timeout=timeout)
        except queue.Empty:
            self.timed_out = True
            self.kill()
            return None

    def ask_json(self, line: str, timeout: float | None = None) -> dict | None:
        """The answer read as JSON; None when the program ended, did not answer in time or
        answered something else."""
        answer = self.ask(line, timeout)
        try:
            return json.loads(answer) if answer is not None else None
        except ValueError:
            return None

    def errors(self, chars: int | None = 300) -> str:
        """Its stderr so far: the last `chars` characters (None: all of it)."""
        self.stderr.seek(0)
        text = self.stderr.read().strip()
        return text if chars is None else text[-chars:]

    def kill(self) -> None:
        """Ends it now (a question it no longer needs to wait for)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.close()

    def close(self) -> None:
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        finally:  # stdout is closed by the thread that reads it, at its end
            if not self.stderr.closed:
                self.stderr.close()
