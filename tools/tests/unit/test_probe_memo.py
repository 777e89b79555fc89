"""`kbuild check`'s load with `kernels` (stages/check/__init__.py probe_load) is remembered in the user's
cache (stages/check/probe_memo.py) for these very files, under this folder name, in this very
interpreter, while every file the load depended on is unchanged: a success is not loaded again;
other bytes, another name, another interpreter or loader environment, a changed dependency, a
failure, an unsafe cache or KBUILD_PROBE_MEMO=off load again, and a folder that changed during
the load is not remembered. The probe itself is a stand-in here (test_memo_trust and the build
tests load for real)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbuild.core.errors import BuildError
from kbuild.stages import check
from kbuild.stages.check import probe_memo

OLD = 10**18  # installed files predate the check (ns since the epoch: 2001)
API = {"python": {"img2gray": {"kind": "function", "signature": "(x)"}}, "layers": {},
       "ops": {"img2gray": "img2gray(Tensor x) -> ()"}}  # remembered with the load


class Probe:
    """The stand-in probe: the variant folders it was asked to load; a `.so` of b"bad" fails; a
    success depends on `files` (and `during`, if set, runs while it loads)."""

    def __init__(self, files: list[Path]):
        self.asked: list[str] = []
        self.files = files
        self.during = None

    def __call__(self, variant, python, kid):
        self.asked.append(variant.name)
        if self.during:
            self.during(variant)
        if (variant / "x.so").read_bytes() == b"bad":
            return {"loadable": False, "reason": "undefined symbol: f", "ops": []}
        return {"loadable": True, "reason": "", "ops": ["img2gray"], "api": API,
                "files": [str(f) for f in self.files]}


@pytest.fixture
def probes(tmp_path, monkeypatch):
    monkeypatch.setenv("KBUILD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(probe_memo.PROBE_MEMO_VAR, raising=False)
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    deps = tmp_path / "site"
    deps.mkdir()
    files = [deps / "einops.py", deps / "libdep.so"]
    for f in files:
        f.write_text(f"# {f.name}\n")
        os.utime(f, ns=(OLD, OLD))
    identities = {sys.executable: '{"python": "this"}', "/other/python": '{"python": "other"}'}
    monkeypatch.setattr(probe_memo, "loader_identity", identities.get)
    probe = Probe(files)
    monkeypatch.setattr(check.PROBERS, "probe", probe)
    return probe


def variant(root, name="torch213-cxx11-cpu-x86_64-linux", so=b"\x7fELF one"):
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "x.so").write_bytes(so)
    (folder / "__init__.py").write_text("from ._ops import ops\n")
    (folder / "metadata.json").write_text('{"id": "_x_1"}')
    return folder


def load(folder, python=sys.executable):
    return check.probe_load(folder, python, "_x_1")


def test_a_success_is_remembered_for_the_same_files_anywhere(probes, tmp_path):
    first = load(variant(tmp_path / "a"))
    assert first["loadable"] and not first.get("remembered") and len(probes.asked) == 1
    copy = load(variant(tmp_path / "b"))  # the same bytes and name in another folder
    assert copy == {"loadable": True, "reason": "", "ops": ["img2gray"], "api": API,
                    "remembered": True}
    assert len(probes.asked) == 1


def test_other_bytes_or_loader_environment_load_again(probes, tmp_path, monkeypatch):
    load(variant(tmp_path / "a"))
    load(variant(tmp_path / "b", so=b"\x7fELF two"))
    assert len(probes.asked) == 2
    cached = variant(tmp_path / "c")
    (cached / "__pycache__").mkdir()
    (cached / "__pycache__" / "x.pyc").write_bytes(b"bytecode is not part of it")
    assert load(cached).get("remembered")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(tmp_path))
    assert not load(cached).get("remembered") and len(probes.asked) == 3



def test_another_probe_script_loads_again(probes, tmp_path, monkeypatch):
    """What a memo holds (the API record included) is what the probe script recorded: a kbuild
    whose probe records more does not take an older script's memo."""
    load(variant(tmp_path / "a"))
    monkeypatch.setattr(probe_memo, "_probe_script", lambda: "0" * 64)
    assert not load(variant(tmp_path / "b")).get("remembered") and len(probes.asked) == 2


def test_the_signature_bundle_is_not_part_of_the_key_and_is_never_read(probes, tmp_path):
    """A load never reads metadata.json.sigstore, so its memo does not key on it: signing a
    variant keeps its memo, and a bundle of gigabytes is not read to make the key (`check` on a
    2 GiB one read it whole)."""
    load(variant(tmp_path / "a"))
    signed = variant(tmp_path / "b")
    with open(signed / "metadata.json.sigstore", "wb") as f:
        f.truncate(64 << 20)  # sparse: no disk used
    assert load(signed).get("remembered") and len(probes.asked) == 1

def test_a_failure_is_loaded_every_time(probes, tmp_path):
    bad = variant(tmp_path / "a", so=b"bad")
    assert not load(bad)["loadable"] and not load(bad)["loadable"]
    assert len(probes.asked) == 2


def test_memo_off_or_an_unsafe_cache_loads_again(probes, tmp_path, monkeypatch):
    folder = variant(tmp_path / "a")
    load(folder)
    for off in ("off", "0", "false", "No", "none", " disabled "):
        monkeypatch.setenv(probe_memo.PROBE_MEMO_VAR, off)
        assert not load(folder).get("remembered")
    monkeypatch.setenv(probe_memo.PROBE_MEMO_VAR, "on")
    assert load(folder).get("remembered")
    monkeypatch.delenv(probe_memo.PROBE_MEMO_VAR)
    memo = tmp_path / "cache" / "probed"
    memo.chmod(0o777)  # anyone could plant a success
    assert not load(folder).get("remembered")
    memo.chmod(0o755)
    planted, = (p for p in memo.iterdir() if not p.name.startswith("files-"))  # the memo
    planted.unlink()
    planted.symlink_to(folder / "x.so")  # a link is not a memo
    assert not load(folder).get("remembered")
    assert len(probes.asked) == 9
    shutil.rmtree(memo)


@pytest.mark.parametrize("value", ["maybe", "of", "2", "offf"])
def test_an_unknown_memo_setting_is_refused(probes, tmp_path, monkeypatch, value):
    monkeypatch.setenv(probe_memo.PROBE_MEMO_VAR, value)
    with pytest.raises(BuildError) as info:
        load(variant(tmp_path / "a"))
    assert f"KBUILD_PROBE_MEMO={value!r} is neither on nor off" in str(info.value)
    assert "none, disabled (off)" in info.value.hint and probes.asked == []


def test_a_folder_changed_during_its_load_is_not_remembered(probes, tmp_path):
    """A build that lands while the load runs: what was fingerprinted is not what was loaded."""
    folder = variant(tmp_path / "a", so=b"bad")
    good = variant(tmp_path / "good")

    def build_lands(loading):
        if loading == folder:
            (folder / "x.so").unlink()
            shutil.copy(good / "x.so", folder / "x.so")
    probes.during = build_lands
    assert load(folder)["loadable"]  # the new files loaded
    probes.during = None
    (folder / "x.so").write_bytes(b"bad")  # the old files again: no success was remembered
    assert not load(folder)["loadable"]
    assert load(good)["loadable"]
    assert len(probes.asked) == 3


# --- property: any change to what the load depended on misses; what it did not, hits ----------

def _rewrite(path: Path, data: bytes) -> None:
    path.write_bytes(data)


def _replace(path: Path, data: bytes) -> None:
    new = path.with_name(path.name + ".new")
    new.write_bytes(data)
    os.utime(new, ns=(OLD, OLD))  # even with the old mtime: another file
    os.replace(new, path)


MISSES = {
    "a shipped file's bytes": lambda v, d, data: _rewrite(v / "x.so", data),
    "a shipped file replaced, old mtime": lambda v, d, data: _replace(v / "__init__.py", data),
    "a file added": lambda v, d, data: (v / "extra.py").write_bytes(data),
    "a file removed": lambda v, d, data: (v / "__init__.py").unlink(),
    "the folder's name": lambda v, d, data: v.rename(v.with_name("torch212-cxx11-cpu-x86_64-linux")),
    "the interpreter": lambda v, d, data: "/other/python",
    "a dependency rewritten": lambda v, d, data: _rewrite(d[0], data),
    "a dependency replaced, old mtime": lambda v, d, data: _replace(d[1], data),
    "a dependency removed": lambda v, d, data: d[0].unlink(),
}
HITS = {
    "nothing": lambda v, d, data: None,
    "bytecode added": lambda v, d, data: ((v / "__pycache__").mkdir(),
                                          (v / "__pycache__" / "x.pyc").write_bytes(data)),
    "a shipped file touched": lambda v, d, data: os.utime(v / "x.so", ns=(OLD, OLD)),
    "the folder moved": lambda v, d, data: v.rename(v.parent.parent / v.name),
}


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(change=st.sampled_from(sorted(MISSES) + sorted(HITS)), data=st.binary(max_size=16))
def test_any_change_to_what_the_load_depended_on_misses(probes, tmp_path, change, data):
    case = len(list(tmp_path.glob("case*")))
    root = tmp_path / f"case{case}" / "build"
    folder = variant(root, so=b"\x7fELF %d" % case)  # no memo of an earlier case applies
    assert not load(folder).get("remembered")
    asked = len(probes.asked)
    before = {p: p.read_bytes() for p in [folder / "x.so", folder / "__init__.py", *probes.files]}
    done = (MISSES.get(change) or HITS[change])(folder, probes.files, data)
    python = done if isinstance(done, str) else sys.executable  # (the interpreter's change)
    moved = [p for p in (folder, root.parent / folder.name,
                         folder.with_name("torch212-cxx11-cpu-x86_64-linux")) if p.is_dir()]
    now = {p: p.read_bytes() if p.exists() else None for p in before}
    if change in MISSES and now == before and change not in ("the folder's name", "the interpreter",
                                                             "a file added"):
        return  # the "new" bytes were the old ones: nothing changed
    result = load(moved[0], python)
    assert bool(result.get("remembered")) == (change in HITS), change
    assert len(probes.asked) == asked + (change in MISSES)
    for path, data_before in before.items():  # the next case starts from the same dependencies
        if path in probes.files:
            path.write_bytes(data_before)
            os.utime(path, ns=(OLD, OLD))
