"""A byte-identical `.so` that loaded in this interpreter once is not loaded again, also from
another work dir (a rebuild after `kbuild clean`, another copy of the project), as long as the
user's cache that remembers it is safe; a different `.so` or torch is loaded again."""

from __future__ import annotations

from types import SimpleNamespace

from kbuild.stages.check import loadcheck


def plan(torch_version: str = "2.13.0"):
    return SimpleNamespace(torch=SimpleNamespace(python="/env/bin/python", torch_version=torch_version))


def remember(so, p) -> None:
    key = loadcheck._stamp(so, p.torch.python, p.torch.torch_version)
    loadcheck._remembered(key).touch(mode=0o644)


def test_remembered_in_the_users_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KBUILD_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir(mode=0o755)
    so = tmp_path / "a.so"
    so.write_bytes(b"\x7fELF same bytes")
    work_a, work_b = tmp_path / "a", tmp_path / "b"
    work_a.mkdir(), work_b.mkdir()
    assert not loadcheck.loaded_before(plan(), so, work_b)
    remember(so, plan())
    assert loadcheck.loaded_before(plan(), so, work_b)
    assert not loadcheck.loaded_before(plan("2.14.1"), so, work_b)  # another torch
    so.write_bytes(b"\x7fELF other bytes")
    assert not loadcheck.loaded_before(plan(), so, work_b)


def test_an_unsafe_cache_is_not_trusted(tmp_path, monkeypatch):
    monkeypatch.setenv("KBUILD_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir(mode=0o755)
    so = tmp_path / "a.so"
    so.write_bytes(b"\x7fELF")
    remember(so, plan())
    folder = tmp_path / "cache" / "loaded"
    folder.chmod(0o777)  # anyone could plant a stamp
    assert not loadcheck.loaded_before(plan(), so, tmp_path)
    folder.chmod(0o755)
    stamp = next(folder.iterdir())
    stamp.unlink()
    stamp.symlink_to(so)  # a link is not a stamp
    assert not loadcheck.loaded_before(plan(), so, tmp_path)
