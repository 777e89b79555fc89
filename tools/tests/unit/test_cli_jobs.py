"""--jobs, --compile-jobs, --max-jobs (from 1) and --cores (from 0: all cores): a count below
that is refused at once with one message (exit 2 through main), before any environment is
realised or CMake is run."""

from __future__ import annotations


import pytest

from kbuild.core.errors import BuildError
from kbuild_testing import invoke


@pytest.mark.parametrize("args, option", [
    (["build", "--jobs", "0"], "--jobs"),
    (["build", "--jobs", "-3", "--env", "nowhere"], "--jobs"),
    (["build-all", "--jobs", "0"], "--jobs"),
    (["build-all", "--compile-jobs", "-1"], "--compile-jobs"),
    (["build", "--max-jobs", "0"], "--max-jobs"),  # kernel-builder's flags (issue 46)
    (["build", "--cores", "-2", "--env", "nowhere"], "--cores"),
    (["build-all", "--max-jobs", "-1"], "--max-jobs"),
    (["build-all", "--cores", "-1"], "--cores"),
])
def test_non_positive_job_counts_are_refused_before_anything_runs(tmp_path, args, option):
    (tmp_path / "build.toml").write_text("[general]\nname = 'x'\n")
    result = invoke(*args, cwd=tmp_path)
    assert isinstance(result.exception, BuildError), result.output
    assert result.exception.message.startswith(f"{option} ") and result.exception.hint
    assert not (tmp_path / ".kbuild").exists() and not (tmp_path / "build").exists()
