"""The compiler cache's hits and misses, read from its own counters (fake sccache/ccache)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from kbuild.stages.compile import CacheCounts, cache_counts, cache_env


def fake_tool(tmp_path: Path, name: str, output: str) -> str:
    path = tmp_path / name
    (tmp_path / "out.txt").write_text(output)
    path.write_text(f"#!/bin/sh\ncat '{tmp_path / 'out.txt'}'\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_sccache_counters_are_summed_over_languages(tmp_path):
    stats = {"stats": {"cache_hits": {"counts": {"C/C++": 3, "CUDA": 2}},
                       "cache_misses": {"counts": {"CUDA": 4}}}}
    tool = fake_tool(tmp_path, "sccache", json.dumps(stats))
    assert cache_counts(tool) == CacheCounts("sccache", 5, 4)
    assert str(cache_counts(tool)) == "compiler cache (sccache): 5 hits, 4 misses"


def test_ccache_counters(tmp_path):
    tool = fake_tool(tmp_path, "ccache", "direct_cache_hit\t2\npreprocessed_cache_hit\t1\ncache_miss\t7\n")
    assert cache_counts(tool) == CacheCounts("ccache", 3, 7)


def test_no_cache_or_unreadable_counters(tmp_path):
    assert cache_counts(None) is None
    assert cache_counts(fake_tool(tmp_path, "sccache", "not json")) is None


def test_ccache_sees_project_paths_as_relative(tmp_path, monkeypatch):
    monkeypatch.delenv("CCACHE_BASEDIR", raising=False)
    assert cache_env("/x/bin/ccache", tmp_path)["CCACHE_BASEDIR"] == str(tmp_path.resolve())
    assert "CCACHE_BASEDIR" not in cache_env("/x/bin/sccache", tmp_path)
    assert "CCACHE_BASEDIR" not in cache_env(None, tmp_path)
    odd = tmp_path / "a $HOME ${X}"
    odd.mkdir()
    assert cache_env("/x/bin/ccache", odd)["CCACHE_BASEDIR"] == str(odd.resolve()).replace("$", "$$")
    monkeypatch.setenv("CCACHE_BASEDIR", "/mine")  # the user's own setting wins
    assert cache_env("/x/bin/ccache", tmp_path)["CCACHE_BASEDIR"] == "/mine"
