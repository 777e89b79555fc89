"""`kbuild upload`'s API guard against the test Hub: a build's public API (as its real load with
`kernels` reports it) compared with what branch v<version> holds. Noarch projects whose package
registers an op through torch.library (no compiler needed), built for real."""

from __future__ import annotations

from functools import partial
import itertools
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi

from kbuild.core.errors import BuildError
from kbuild.publish import upload as publish
from kbuild.stages import pipeline
from kbuild_hub.server import HubServer
from kbuild_testing import make_project, kbuild as run_kbuild

pytest.importorskip("httpx2", reason="huggingface_hub's HTTP client (hub ≥ 1.x)")

TOKEN = "hf_api_guard_test_token_3d9e"
VARIANT = "torch-cpu"
BASE = '''\
"""demo: scale and shift."""
import torch

from ._ops import add_op_namespace_prefix

__all__ = ["scale", "shift"{extra_names}]


@torch.library.custom_op(add_op_namespace_prefix("scale"), mutates_args=())
def _scale(x: torch.Tensor, factor: {factor_type}) -> torch.Tensor:
    return x * factor


def scale(x: torch.Tensor, factor: {factor_type} = 2) -> torch.Tensor:
    return _scale(x, factor)


def shift(x: torch.Tensor, by: float) -> torch.Tensor:
    return x + by
{extra}'''
HALVE = '''

def halve(x: torch.Tensor) -> torch.Tensor:
    return x / 2
'''
REPOS = (f"kernels-test/demo-{n}" for n in itertools.count())


def demo(root: Path, *, factor_type: str = "float", without: str | None = None,
         add_halve: bool = False, code: str = "") -> Path:
    """The demo kernel built (noarch, CPU), its package as BASE says, then `code`."""
    project = make_project(root, "[torch-noarch]\n", backends='["cpu"]')
    text = BASE.format(factor_type=factor_type, extra_names=', "halve"' if add_halve else "",
                       extra=HALVE if add_halve else "") + code
    if without:
        text = text.replace(f', "{without}"', "").replace(f'def {without}(', f'def _{without}(')
    (project / "torch-ext" / "demo" / "__init__.py").write_text(text)
    pipeline.build(project)
    return project


@pytest.fixture(scope="module")
def hub():
    with HubServer(token=TOKEN) as server:
        yield server


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return demo(tmp_path_factory.mktemp("base") / "demo")


def upload(hub: HubServer, project: Path, repo: str,
           **kw) -> tuple[publish.UploadResult, list[str]]:
    """In process, with the load (the API is what the load reports)."""
    logs: list[str] = []
    options = publish.UploadOptions(repo_id=repo, endpoint=hub.url, token=TOKEN, backoff=0.01, **kw)
    return publish.upload(project, options, log=logs.append, warn=logs.append), logs


@pytest.fixture
def repo(hub, base) -> str:
    """A repo whose v1 holds the base build."""
    name = next(REPOS)
    result, logs = upload(hub, base, name)
    assert result.status == "uploaded"
    assert f"api: {name} has no branch v1 yet: no API to compare with" in logs
    return name


def writes(hub: HubServer, since: int) -> list:
    return [r for r in hub.requests[since:] if r[0] not in ("GET", "HEAD")]


def test_removing_a_public_function_is_refused_naming_it(hub, repo, tmp_path):
    removed = demo(tmp_path / "demo", without="shift")
    since = len(hub.requests)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "KERNELS_"))}
    env.update(HF_ENDPOINT=hub.url, HF_TOKEN=TOKEN, HF_HOME=str(tmp_path / "hf_home"),
               COLUMNS="400")
    proc = subprocess.run([sys.executable, "-m", "kbuild", "upload", str(removed),
                           "--repo-id", repo], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: {removed / 'build.toml'}: key `general.version`: this upload would "
                      f"break the public API of version 1 on v1 ({VARIANT}: function shift "
                      "removed); nothing was written"]
    assert "bump general.version (a new branch), or pass --allow-api-change" in proc.stderr
    assert "Traceback" not in proc.stderr and writes(hub, since) == []

    diff = subprocess.run([sys.executable, "-m", "kbuild", "api-diff", str(removed), "--repo-id",
                           repo], env=env, capture_output=True, text=True, timeout=300)
    assert diff.returncode == 1, diff.stderr
    assert diff.stdout.splitlines() == [
        f"- {VARIANT}: function shift removed (was `shift(x: torch.Tensor, by: float) -> "
        "torch.Tensor`) [incompatible]"]


def test_changing_an_op_schema_is_refused_naming_it(hub, repo, tmp_path):
    changed = demo(tmp_path / "demo", factor_type="int")
    since = len(hub.requests)
    with pytest.raises(BuildError) as caught:
        upload(hub, changed, repo)
    assert f"({VARIANT}: op scale changed)" in str(caught.value)  # annotations alone: compatible
    assert writes(hub, since) == []


def test_adding_a_function_passes(hub, repo, tmp_path):
    added = demo(tmp_path / "demo", add_halve=True)
    result, logs = upload(hub, added, repo)
    assert result.status == "uploaded"
    assert (f"api: + {VARIANT}: function halve added: `halve(x: torch.Tensor) -> torch.Tensor`"
            in logs)
    assert not [line for line in logs if "[incompatible]" in line]


def test_allow_api_change_passes(hub, repo, tmp_path):
    changed = demo(tmp_path / "demo", factor_type="int", without="shift")
    result, logs = upload(hub, changed, repo, allow_api_change=True)
    assert result.status == "uploaded"
    assert f"api: - {VARIANT}: function shift removed (was `shift(x: torch.Tensor, by: float) " \
           "-> torch.Tensor`) [incompatible]" in logs
    assert (f"api: ~ {VARIANT}: op scale changed from `scale(Tensor x, float factor) -> Tensor` "
            "to `scale(Tensor x, SymInt factor) -> Tensor` [incompatible]") in logs
    # the same build again: nothing to compare (the files are the branch's)
    again, logs = upload(hub, changed, repo)
    assert again.status == "no_changes" and not [line for line in logs if line.startswith("api: ~")]


# ----------------------------------------------------------------------------- what the guard runs

SECRETS = {"HF_TOKEN": TOKEN, "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "oidc-request-token",
           "ACTIONS_ID_TOKEN_REQUEST_URL": "http://127.0.0.1:9/token", "GITHUB_TOKEN": "ghs_x",
           "DEPLOY_PASSWORD": "hunter2"}
SNOOP = '''
import os as _os
_os.makedirs({folder!r}, exist_ok=True)
with open(_os.path.join({folder!r}, str(_os.getpid())), "w") as _f:
    _f.write("\\n".join(sorted(_os.environ)))
'''


cli = partial(run_kbuild, inherit=False, timeout=300)  # each test passes its whole environment


def job_env(hub: HubServer, tmp_path: Path, **extra: str) -> dict[str, str]:
    """A CI job's environment: the Hub token and the OIDC request credentials that mint its
    signing identity."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "KERNELS_"))}
    env.update(HF_ENDPOINT=hub.url, HF_HOME=str(tmp_path / "hf_home"), COLUMNS="400", **SECRETS,
               **extra)
    return env


def test_the_guard_never_runs_the_branchs_copy(hub, repo, tmp_path):
    """A member of the Hub repo replaces v1's __init__.py with code that reads the job's secrets;
    `upload` and `api-diff` compare with the API recorded at the last upload instead of loading
    the branch's copy, and say so when the record is not of the branch's files, or missing."""
    ran = tmp_path / "hub-copy-ran"
    api = HfApi(endpoint=hub.url, token=TOKEN)
    hostile = (BASE.format(factor_type="float", extra_names="", extra="")
               + SNOOP.format(folder=str(ran)))
    api.create_commit(repo, repo_type="kernel", revision="v1", commit_message="innocent fix",
                      operations=[CommitOperationAdd(f"build/{VARIANT}/__init__.py",
                                                     hostile.encode())])
    env = job_env(hub, tmp_path)
    added = demo(tmp_path / "demo", add_halve=True)
    diff = cli("api-diff", str(added), "--repo-id", repo, env=env)
    done = cli("upload", str(added), "--repo-id", repo, env=env)
    assert done.returncode == 0, done.stderr
    not_compared = (f"{VARIANT}: API not compared (its API record on v1 describes other files "
                    "than the branch holds: uploaded by another tool since?)")
    assert not_compared in diff.stdout + diff.stderr and f"api: {not_compared}" in done.stdout
    assert not ran.exists()  # the branch's code never ran, here or in a load

    api.create_commit(repo, repo_type="kernel", revision="v1", commit_message="no record",
                      operations=[CommitOperationDelete(f"api/{VARIANT}.json"),
                                  CommitOperationAdd(f"build/{VARIANT}/__init__.py",
                                                     hostile.encode())])
    again = cli("upload", str(added), "--repo-id", repo, env=env)
    assert again.returncode == 0, again.stderr
    assert f"api: {VARIANT}: API not compared (no API record)" in again.stdout
    assert not ran.exists() and "%|" not in done.stderr + again.stderr  # no progress bars either
    assert hub.files(repo, revision="v1")[f"api/{VARIANT}.json"]  # this upload recorded its API


def test_a_load_gets_none_of_the_environments_secrets(hub, tmp_path, monkeypatch):
    seen = tmp_path / "seen"
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    snooping = demo(tmp_path / "demo", code=SNOOP.format(folder=str(seen)))
    result, _ = upload(hub, snooping, next(REPOS))
    assert result.status == "uploaded"
    loads = [p.read_text().splitlines() for p in seen.iterdir()]
    assert loads  # it was loaded (the check, the API it records) ...
    for names in loads:  # ... never with a secret, nor huggingface_hub's token file
        assert not set(SECRETS) & set(names) and "HF_TOKEN_PATH" in names


def test_a_variant_changed_by_its_own_load_is_refused(hub, tmp_path, monkeypatch):
    tamper = '''
if _os.environ.get("DEMO_TAMPER"):
    with open(_os.path.join(_os.path.dirname(__file__), "_ops.py"), "a") as _f:
        _f.write("# changed by its own load\\n")
'''
    project = demo(tmp_path / "demo", code="import os as _os\n" + tamper)
    monkeypatch.setenv("DEMO_TAMPER", "1")
    monkeypatch.setenv("KBUILD_PROBE_MEMO", "off")  # every check loads it
    since = len(hub.requests)
    with pytest.raises(BuildError) as caught:
        upload(hub, project, next(REPOS))
    assert str(caught.value).startswith(
        f"{project / 'build' / VARIANT}: variant {VARIANT} changed while it was checked and "
        "loaded (_ops.py); nothing was written")
    assert writes(hub, since) == []


def test_a_load_that_hangs_is_stopped_naming_the_variant(tmp_path):
    hang = 'import os as _os, time as _time\nif _os.environ.get("DEMO_HANG"):\n    _time.sleep(3600)\n'
    project = demo(tmp_path / "demo", code=hang)
    env = {**os.environ, "DEMO_HANG": "1", "KBUILD_PROBE_TIMEOUT": "20",
           "KBUILD_PROBE_MEMO": "off", "COLUMNS": "400"}
    started = time.monotonic()
    checked = cli("check", str(project), env=env, timeout=240)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert (f"load: the load of {VARIANT} did not finish in 20 s; stopped it (its import hangs? "
            "KBUILD_PROBE_TIMEOUT sets the time)") in checked.stdout
    assert time.monotonic() - started < 120


@pytest.mark.parametrize("api_value", [{"python": {"scale": "not an entry"}, "ops": [1]},
                                       {"python": [[[[[]]]]] * 2},
                                       "deep"])
def test_a_record_of_another_shape_is_not_compared_and_said(hub, repo, tmp_path, api_value):
    """The record is data whoever can write to the repo can write: any shape, any depth."""
    import json
    record = json.loads(hub.files(repo, revision="v1")[f"api/{VARIANT}.json"])
    if api_value == "deep":
        text = json.dumps({**record, "api": "@"}).replace('"@"', "[" * 100_000 + "]" * 100_000)
    else:
        text = json.dumps({**record, "api": api_value})
    HfApi(endpoint=hub.url, token=TOKEN).create_commit(
        repo, repo_type="kernel", revision="v1", commit_message="odd record",
        operations=[CommitOperationAdd(f"api/{VARIANT}.json", text.encode())])
    result, logs = upload(hub, demo(tmp_path / "demo", add_halve=True), repo)
    assert result.status == "uploaded"
    assert [line for line in logs if line.startswith(f"api: {VARIANT}: API not compared (its API "
                                                     "record on v1 is unreadable: ")], logs
