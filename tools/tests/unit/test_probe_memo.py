"""`kbuild check`'s load with `kernels` (stages/check.py probe_load) is remembered in the user's
cache for these very files in this very interpreter: a success is not loaded again; other bytes,
another loader environment, a failure, an unsafe cache or KBUILD_PROBE_MEMO=off load again.
The probe itself is a stand-in here (test_probe_reuse and the build tests load for real)."""

from __future__ import annotations

import shutil
import sys

import pytest

from kbuild.stages import check


@pytest.fixture
def probes(tmp_path, monkeypatch):
    """The variant folders the stand-in probe was asked to load; a `.so` of b"bad" fails."""
    monkeypatch.setenv("KBUILD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(check.PROBE_MEMO_VAR, raising=False)
    asked: list[str] = []

    def probe(variant, python, kid):
        asked.append(variant.name)
        if (variant / "x.so").read_bytes() == b"bad":
            return {"loadable": False, "reason": "undefined symbol: f", "ops": []}
        return {"loadable": True, "reason": "", "ops": ["img2gray"]}

    monkeypatch.setattr(check.PROBERS, "probe", probe)
    return asked


def variant(root, name="v", so=b"\x7fELF one"):
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "x.so").write_bytes(so)
    (folder / "metadata.json").write_text('{"id": "_x_1"}')
    return folder


def load(folder):
    return check.probe_load(folder, sys.executable, "_x_1")


def test_a_success_is_remembered_for_the_same_files_anywhere(probes, tmp_path):
    first = load(variant(tmp_path / "a"))
    assert first["loadable"] and not first.get("remembered") and probes == ["v"]
    copy = load(variant(tmp_path / "b"))  # the same bytes in another folder
    assert copy == {"loadable": True, "reason": "", "ops": ["img2gray"], "remembered": True}
    assert probes == ["v"]


def test_other_bytes_or_loader_environment_load_again(probes, tmp_path, monkeypatch):
    load(variant(tmp_path / "a"))
    load(variant(tmp_path / "b", so=b"\x7fELF two"))
    assert probes == ["v", "v"]
    cached = variant(tmp_path / "c")
    (cached / "__pycache__").mkdir()
    (cached / "__pycache__" / "x.pyc").write_bytes(b"bytecode is not part of it")
    assert load(cached).get("remembered")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(tmp_path))
    assert not load(cached).get("remembered") and len(probes) == 3


def test_a_failure_is_loaded_every_time(probes, tmp_path):
    bad = variant(tmp_path / "a", so=b"bad")
    assert not load(bad)["loadable"] and not load(bad)["loadable"]
    assert probes == ["v", "v"]


def test_memo_off_or_an_unsafe_cache_loads_again(probes, tmp_path, monkeypatch):
    folder = variant(tmp_path / "a")
    load(folder)
    monkeypatch.setenv(check.PROBE_MEMO_VAR, "off")
    assert not load(folder).get("remembered")
    monkeypatch.delenv(check.PROBE_MEMO_VAR)
    memo = tmp_path / "cache" / "probed"
    memo.chmod(0o777)  # anyone could plant a success
    assert not load(folder).get("remembered")
    memo.chmod(0o755)
    planted = next(memo.iterdir())
    planted.unlink()
    planted.symlink_to(folder / "x.so")  # a link is not a memo
    assert not load(folder).get("remembered")
    assert probes == ["v"] * 4
    shutil.rmtree(memo)
