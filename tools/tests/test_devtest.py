"""`kbuild dev`'s test step (stages/devtest.py): pytest runs the project's tests/ in the target
interpreter, its exit status is the step's, and a traceback through a built variant's file
names the torch-ext/ file it was copied from."""

from __future__ import annotations

import sys
from pathlib import Path

from kbuild.stages import devtest, pipeline
from kbuild_testing import make_project

TEST = '''import importlib.util
from pathlib import Path

VARIANT = Path(__file__).resolve().parents[1] / "build" / "torch-cpu"


def load():
    spec = importlib.util.spec_from_file_location("demo", VARIANT / "__init__.py",
                                                  submodule_search_locations=[str(VARIANT)])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_passes():
    assert load().double(2) == 4


def test_fails():
    load().fail()
'''
INIT = "def double(x):\n    return 2 * x\n\n\ndef fail():\n    raise ValueError('from the kernel')\n"


def test_failures_point_at_torch_ext_and_set_the_status(tmp_path):
    project = make_project(tmp_path / "demo", "[torch-noarch]\n", backends='["cpu"]')
    (project / "torch-ext" / "demo" / "__init__.py").write_text(INIT)
    (project / "tests").mkdir()
    (project / "tests" / "test_demo.py").write_text(TEST)
    pipeline.build(project)
    lines: list[str] = []
    code = devtest.run_tests(project, sys.executable, ["-p", "no:cacheprovider"], write=lines.append)
    text = "".join(lines)
    assert code == 1 and "1 failed, 1 passed" in text, text
    assert "torch-ext/demo/__init__.py:6: ValueError" in text
    assert "build/torch-cpu/__init__.py" not in text and str(project / "build") not in text
    lines.clear()
    assert devtest.run_tests(project, sys.executable, ["-p", "no:cacheprovider", "-k", "passes"],
                             write=lines.append) == 0


def test_local_kernels_keeps_the_users_other_entries_and_replaces_ours(tmp_path):
    """kernels' own format (`repo=path` joined by `:`): the manifest's repo points at the build
    under test, entries for other repositories stay, a malformed one is refused by name, and a
    path the format cannot carry (`:`) is refused; one with `=` is carried, and the loader's own
    parser reads it back as that path."""
    import pytest
    from kbuild.core.errors import BuildError
    from kernels.load import _parse_local_kernel_overrides

    here = tmp_path / "build" / "torch-cpu"
    assert devtest.local_kernels(None, "org/demo", here) == f"org/demo={here}"
    mixed = "other/a=/x/a:org/demo=/stale/copy:other/b=/x/b"
    assert devtest.local_kernels(mixed, "org/demo", here) == \
        f"other/a=/x/a:other/b=/x/b:org/demo={here}"
    with pytest.raises(BuildError, match="entry 'nonsense' is not of the form repo=path"):
        devtest.local_kernels("nonsense", "org/demo", here)
    with pytest.raises(BuildError, match="holds `:`, which LOCAL_KERNELS cannot carry"):
        devtest.local_kernels(None, "org/demo", tmp_path / "a:b")
    odd = tmp_path / "k=v" / "build=x"
    value = devtest.local_kernels("other/a=/x/a=b", "org/demo", odd)
    assert _parse_local_kernel_overrides(value) == {"other/a": Path("/x/a=b"), "org/demo": odd}


def test_no_tests_collected_is_said_in_words():
    words = devtest.status_words(devtest.NO_TESTS_COLLECTED, ["-m", "kernels_ci"])
    assert words and "no tests collected" in words and "`-m kernels_ci`" in words
    assert devtest.status_words(0, []) is None and devtest.status_words(1, []) is None
