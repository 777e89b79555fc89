"""The load check's limits, with stand-in interpreters (no torch): a load that does not answer is
stopped after KBUILD_PROBE_TIMEOUT seconds with one line naming the variant, and the process
that loads a variant gets none of this environment's secrets."""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from pathlib import Path

import pytest

from kbuild.core.errors import BuildError
from kbuild.core.secrets import without_secrets
from kbuild.stages.check import Probers, probe_timeout


def interpreter(path: Path, body: str) -> str:
    """An executable that stands in for a target interpreter running probe_variant.py."""
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_a_load_that_never_answers_is_stopped(tmp_path, monkeypatch):
    monkeypatch.setenv("KBUILD_PROBE_TIMEOUT", "1.5")
    hangs = interpreter(tmp_path / "python", "import sys, time\nsys.stdin.readline()\n"
                                              "time.sleep(3600)\n")
    probers = Probers()
    started = time.monotonic()
    result = probers.probe(tmp_path / "build" / "torch-cpu", hangs, "_demo_1")
    assert time.monotonic() - started < 10
    assert result == {"loadable": False, "timed_out": True, "reason": (
        "the load of torch-cpu did not finish in 1.5 s; stopped it (its import hangs? "
        "KBUILD_PROBE_TIMEOUT sets the time)")}
    assert probers.workers == {}  # not kept


def test_the_loading_process_gets_no_secrets(tmp_path, monkeypatch):
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "ACTIONS_ID_TOKEN_REQUEST_TOKEN",
                 "ACTIONS_ID_TOKEN_REQUEST_URL", "ACTIONS_RUNTIME_TOKEN", "GITHUB_TOKEN",
                 "SIGSTORE_ID_TOKEN", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "SSH_AUTH_SOCK"):
        monkeypatch.setenv(name, "s3cret")
    monkeypatch.setenv("LOCAL_KERNELS", "org/k=/x")
    answers = interpreter(tmp_path / "python", "import json, os, sys\nsys.stdin.readline()\n"
                          "print('KBUILD-PROBE ' + json.dumps({'loadable': False, 'skipped': True,"
                          " 'reason': '', 'env': dict(os.environ)}), flush=True)\n")
    result = Probers().probe(tmp_path / "torch-cpu", answers, "_demo_1")
    env = result["env"]
    assert "s3cret" not in json.dumps(env) and env["LOCAL_KERNELS"] == "org/k=/x"
    assert env["HF_TOKEN_PATH"] == os.devnull and env["HF_HUB_DISABLE_IMPLICIT_TOKEN"] == "1"
    assert without_secrets({"PATH": "/bin", "MY_API_KEY": "k"}) == {
        "PATH": "/bin", "HF_TOKEN_PATH": os.devnull, "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1"}


@pytest.mark.parametrize("value", ["soon", "0", "-5", "inf", "nan"])
def test_a_bad_timeout_is_one_clear_error(monkeypatch, value):
    monkeypatch.setenv("KBUILD_PROBE_TIMEOUT", value)
    with pytest.raises(BuildError, match=f"KBUILD_PROBE_TIMEOUT={value!r} is not a number of "
                                         "seconds"):
        probe_timeout()
    monkeypatch.delenv("KBUILD_PROBE_TIMEOUT")
    assert probe_timeout() == 300
