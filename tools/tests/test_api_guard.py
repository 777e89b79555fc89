"""`kbuild upload`'s API guard against the test Hub: a build's public API (as its real load with
`kernels` reports it) compared with what branch v<version> holds. Noarch projects whose package
registers an op through torch.library (no compiler needed), built for real."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kbuild.core.errors import BuildError
from kbuild.publish import upload as publish
from kbuild.stages import pipeline
from kbuild_hub.server import HubServer
from kbuild_testing import make_project

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
         add_halve: bool = False) -> Path:
    """The demo kernel built (noarch, CPU), its package as BASE says."""
    project = make_project(root, "[torch-noarch]\n", backends='["cpu"]')
    text = BASE.format(factor_type=factor_type, extra_names=', "halve"' if add_halve else "",
                       extra=HALVE if add_halve else "")
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
