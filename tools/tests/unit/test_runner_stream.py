"""runner.stream with `lets_child_stop` (the test runs of `dev` and `test`): Ctrl-C reaches the
child too, and what the child prints while it stops (pytest's summary) is still shown, its
exit status returned. Without it the interrupt propagates at once."""

from __future__ import annotations

import os
import signal
import sys

import pytest

from kbuild.core.runner import stream

CHILD = """
import signal, sys, time
def stop(*_):
    print("summary: 1 passed", flush=True)
    sys.exit(7)
signal.signal(signal.SIGINT, stop)
print("started", flush=True)
time.sleep(60)
"""


def interrupt_on_start(lines: list[str]):
    def on_line(line: str) -> None:
        lines.append(line)
        if line.startswith("started"):
            pid = on_line.pid()
            os.kill(pid, signal.SIGINT)  # what the terminal sends the child on Ctrl-C
            raise KeyboardInterrupt  # ... and this process
    return on_line


def test_the_childs_last_words_are_shown_and_its_status_returned(monkeypatch):
    import subprocess
    started: list = []
    real = subprocess.Popen

    def popen(*a, **k):
        started.append(real(*a, **k))
        return started[-1]
    monkeypatch.setattr(subprocess, "Popen", popen)
    lines: list[str] = []
    on_line = interrupt_on_start(lines)
    on_line.pid = lambda: started[-1].pid
    assert stream([sys.executable, "-c", CHILD], on_line, lets_child_stop=True) == 7
    assert lines == ["started\n", "summary: 1 passed\n"]

    lines.clear()
    with pytest.raises(KeyboardInterrupt):
        stream([sys.executable, "-c", CHILD], on_line)
