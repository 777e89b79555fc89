"""core/files.py: `write_atomic`, the one way kbuild replaces a file: readers see the old bytes or
the new, never a part; a link in the way is never written through."""

from __future__ import annotations

import os
import stat

import pytest

from kbuild.core import files
from kbuild.core.files import write_atomic


def test_writes_bytes_or_text_and_replaces_what_was_there(tmp_path):
    target = tmp_path / "out.json"
    write_atomic(target, b"one")
    assert target.read_bytes() == b"one"
    inode = target.stat().st_ino
    write_atomic(target, "twö")
    assert target.read_text(encoding="utf-8") == "twö" and target.stat().st_ino != inode
    assert os.listdir(tmp_path) == ["out.json"]  # no temporary file left


def test_mode_given_or_as_a_new_file_gets(tmp_path):
    write_atomic(tmp_path / "script", b"#!/bin/sh\n", mode=0o755)
    assert stat.S_IMODE((tmp_path / "script").stat().st_mode) == 0o755
    umask = os.umask(0o022)
    try:
        write_atomic(tmp_path / "plain", b"x")
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "plain").stat().st_mode) == 0o644


def test_a_link_at_the_target_is_replaced_not_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.write_text("keep")
    link = tmp_path / "dir" / "out"
    link.parent.mkdir()
    link.symlink_to(outside)
    write_atomic(link, b"new")
    assert outside.read_text() == "keep"
    assert not link.is_symlink() and link.read_bytes() == b"new"


def test_a_link_at_the_temporary_path_is_never_followed(tmp_path, monkeypatch):
    """Whatever stands at a temporary name (a link planted where it will be created, dangling
    or not) is left alone, and another name is taken."""
    outside = tmp_path / "outside"
    outside.write_text("keep")
    (tmp_path / "dir").mkdir()
    names = iter([".out.planted.tmp", ".out.dangling.tmp", ".out.fresh.tmp"])
    monkeypatch.setattr(files, "_temporary_name", lambda target: next(names))
    (tmp_path / "dir" / ".out.planted.tmp").symlink_to(outside)
    (tmp_path / "dir" / ".out.dangling.tmp").symlink_to(tmp_path / "nowhere")
    write_atomic(tmp_path / "dir" / "out", b"new")
    assert outside.read_text() == "keep" and not (tmp_path / "nowhere").exists()
    assert (tmp_path / "dir" / "out").read_bytes() == b"new"
    assert sorted(os.listdir(tmp_path / "dir")) == [".out.dangling.tmp", ".out.planted.tmp", "out"]


def test_a_failure_leaves_the_old_file_and_no_temporary_one(tmp_path, monkeypatch):
    target = tmp_path / "out"
    target.write_bytes(b"old")

    def full_disk(fd):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        write_atomic(target, b"new")
    assert target.read_bytes() == b"old" and os.listdir(tmp_path) == ["out"]


def test_a_missing_folder_is_an_error_not_created(tmp_path):
    with pytest.raises(FileNotFoundError):
        write_atomic(tmp_path / "no" / "out", b"x")
    assert not (tmp_path / "no").exists()
