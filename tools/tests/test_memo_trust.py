"""What `kbuild check` and `upload` remember can never pass a variant the real `kernels` would not
load (issue 34's majors, with the real tools): upload loads what ships whatever bytecode a
variant holds, and the check's own load writes none into it; a build that lands during a load
leaves no memo; a Python dependency removed after a load is loaded again; a folder renamed to
another torch is refused. One built img2gray (the session's), copied per case."""

from __future__ import annotations

import importlib._bootstrap_external as bytecode
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from kbuild.core.built import digest_files
from kbuild.core.errors import BuildError
from kbuild.publish import upload as publish
from kbuild.stages import check
from kbuild.stages.check import check_variant
from kbuild_hub.server import HubServer
from kbuild_testing import fresh_copy

TOKEN = "hf_memo_trust_token_71c2"


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """A cache of this test's own: nothing remembered before it."""
    monkeypatch.setenv("KBUILD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("KBUILD_PROBE_MEMO", raising=False)


def copy_of(builds, dst: Path) -> Path:
    """The variant folder of a fresh copy of the session's built img2gray."""
    (variant,) = (m.parent for m in (fresh_copy(builds(), dst) / "build").glob("*/metadata.json"))
    return variant


def edit_init(variant: Path, extra: str) -> str:
    """Appends `extra` to the variant's __init__.py, as a build of that source would have made it
    (the digest follows); returns the text before."""
    init = variant / "__init__.py"
    before = init.read_text()
    init.write_text(before + extra)
    redigest(variant)
    return before


def redigest(variant: Path) -> None:
    meta = json.loads((variant / "metadata.json").read_text())
    meta["digest"]["files"] = digest_files(variant)
    (variant / "metadata.json").write_text(json.dumps(meta, indent=2))


def notes(report) -> str:
    return " ".join([*report.problems, *report.notes])


def test_upload_loads_what_ships_whatever_bytecode_the_variant_holds(builds, tmp_path):
    variant = copy_of(builds, tmp_path / "img2gray")
    good = edit_init(variant, "from ._ops import no_such_name\n")
    broken = variant / "__init__.py"

    report = check_variant(variant)
    assert report.loaded is False and "ImportError" in notes(report), notes(report)
    # The check's own load wrote no bytecode of the variant: not in it, not in a prefix.
    prefix = os.environ.get("PYTHONPYCACHEPREFIX")
    elsewhere = Path(prefix) / variant.relative_to(variant.anchor) if prefix else variant / "__pycache__"
    assert list(variant.rglob("*.pyc")) == [] and list(elsewhere.rglob("*.pyc")) == []

    # Bytecode of the working __init__.py, stamped as the shipped one's (what an import before
    # the edit leaves, by mtime and size), in the variant's __pycache__/ and where this
    # interpreter reads bytecode: a load that read it would pass.
    st = broken.stat()
    pyc = bytecode._code_to_timestamp_pyc(compile(good, str(broken), "exec"), int(st.st_mtime),
                                          st.st_size)
    name = f"__init__.{sys.implementation.cache_tag}.pyc"
    for folder in {variant / "__pycache__", elsewhere}:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(pyc)

    project = variant.parent.parent
    logs: list[str] = []
    with HubServer(token=TOKEN) as hub:
        options = publish.UploadOptions(endpoint=hub.url, token=TOKEN, backoff=0.01, load=True)
        with pytest.raises(BuildError, match="no variant passed `kbuild check`"):
            publish.upload(project, options, log=logs.append, warn=logs.append)
        assert not [r for r in hub.requests if r[0] not in ("GET", "HEAD")], hub.requests
    skipped = [line for line in logs if line.startswith(f"skipping {variant.name}")]
    assert skipped and "ImportError" in skipped[0] and "no_such_name" in skipped[0], logs


def test_a_build_landing_during_the_load_leaves_no_memo(builds, tmp_path, monkeypatch):
    """The memo is made of what was loaded: files that changed under the load are not
    remembered, neither the old ones nor the new ones."""
    good = copy_of(builds, tmp_path / "good")
    bad = copy_of(builds, tmp_path / "bad")
    edit_init(bad, "from ._ops import no_such_name\n")
    old = {n: (bad / n).read_bytes() for n in ("__init__.py", "metadata.json")}
    real_probe = check.PROBERS.probe

    def build_lands(variant, python, kid):  # after the files were fingerprinted, before loading
        for name in old:
            shutil.copy(good / name, bad / f".{name}.new")
            os.replace(bad / f".{name}.new", bad / name)
        return real_probe(variant, python, kid)

    monkeypatch.setattr(check.PROBERS, "probe", build_lands)
    assert check_variant(bad).loaded  # the files of the build that landed
    monkeypatch.setattr(check.PROBERS, "probe", real_probe)
    for name, data in old.items():  # the old files again
        (bad / name).write_bytes(data)
    report = check_variant(bad)
    assert report.loaded is False and "no_such_name" in notes(report), notes(report)


def test_a_dependency_removed_after_a_load_is_loaded_again(builds, tmp_path, monkeypatch):
    """A module the load imported, and a python-depends package kernels looked up: removing
    either after a remembered load makes the next check load (and fail), as without a memo."""
    site = tmp_path / "site"
    (site / "einops").mkdir(parents=True)
    (site / "einops" / "__init__.py").write_text("")
    (site / "kbuild_probe_dep.py").write_text("VALUE = 1\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    variant = copy_of(builds, tmp_path / "img2gray")
    edit_init(variant, "from kbuild_probe_dep import VALUE\n")
    meta = json.loads((variant / "metadata.json").read_text())
    meta["python-depends"] = ["einops"]
    (variant / "metadata.json").write_text(json.dumps(meta, indent=2))

    assert check_variant(variant).loaded
    assert "remembered" in notes(check_variant(variant))
    shutil.rmtree(site / "einops")  # `pip uninstall einops`
    report = check_variant(variant)
    assert report.loaded is False and "requires Python dependency `einops`" in notes(report), notes(report)

    (site / "einops").mkdir()
    (site / "einops" / "__init__.py").write_text("")
    assert check_variant(variant).loaded
    (site / "kbuild_probe_dep.py").unlink()
    report = check_variant(variant)
    assert report.loaded is False and "kbuild_probe_dep" in notes(report), notes(report)


def test_a_folder_renamed_to_another_torch_is_refused(builds, tmp_path):
    variant = copy_of(builds, tmp_path / "img2gray")
    assert check_variant(variant).loaded  # remembered, for these files under this name
    torch = variant.name.split("-")[0]
    other = variant.with_name(variant.name.replace(torch, f"torch2{int(torch[6:]) - 1}", 1))
    variant.rename(other)
    report = check_variant(other)
    assert [p.code for p in report.problems] == ["layout.name-binary"], report.problems
    assert f"built as {variant.name}" in report.problems[0] and report.loaded is None
