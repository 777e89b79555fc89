"""The load check's interpreters (stages/check/__init__.py Probers) are kept between variants: torch and
kernels are imported once for many variants, and a load never happens where the same id was
loaded before, nor after a failed load or a crash."""

from __future__ import annotations

import json
import shutil
import stat
import sys
from pathlib import Path

from kbuild.stages.check import Probers

def counting_python(folder: Path, body: str = 'exec "$REAL" "$@"') -> tuple[str, Path]:
    """An interpreter that records each start in a file."""
    starts = folder / "starts"
    script = folder / "python"
    script.write_text(f'#!/bin/sh\necho start >> "{starts}"\nREAL="{sys.executable}"\n{body}\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script), starts


def started(starts: Path) -> int:
    return len(starts.read_text().split()) if starts.is_file() else 0


def variant(project: Path) -> tuple[Path, str]:
    """The one variant the fixture built (for this machine's torch: cpu, or cuda on a GPU's)."""
    folder, = (m.parent for m in (project / "build").glob("*/metadata.json"))
    return folder, json.loads((folder / "metadata.json").read_text())["id"]


def test_one_interpreter_loads_many_ids_and_a_repeat_or_a_failure_starts_afresh(builds, tmp_path):
    base, marked = variant(builds()), variant(builds("marked", marker="v1b"))
    assert base[1] != marked[1]
    python, starts = counting_python(tmp_path)
    probers = Probers()
    try:
        first = probers.probe(base[0], python, base[1])
        second = probers.probe(marked[0], python, marked[1])
        assert first["loadable"] and second["loadable"], (first, second)
        assert first["ops"] == second["ops"] == ["img2gray"]
        assert started(starts) == 1  # torch and kernels imported once for both

        broken = tmp_path / "broken" / base[0].name
        shutil.copytree(base[0], broken)
        (broken / f"{base[1]}.abi3.so").write_bytes(b"not an ELF file")
        failed = probers.probe(broken, python, base[1])  # the same id again: a fresh one
        assert not failed["loadable"] and not failed.get("skipped") and failed["reason"], failed
        assert started(starts) == 2  # (not the first, which would have said nothing of it)
        assert probers.probe(base[0], python, base[1])["loadable"]  # after a failed load
        assert started(starts) == 3
    finally:
        probers.close()


def test_a_crashed_interpreter_is_a_load_failure_with_its_stderr(builds, tmp_path):
    base = variant(builds())
    python, starts = counting_python(tmp_path, body='echo "probe died early" >&2\nexit 3')
    probers = Probers()
    try:
        result = probers.probe(base[0], python, base[1])
        assert not result["loadable"] and result["crashed"], result
        assert "probe died early" in result["reason"], result
        probers.probe(base[0], python, base[1])
        assert started(starts) == 2  # a crashed interpreter is not asked again
    finally:
        probers.close()
