"""`kbuild dev`'s test step (stages/devtest/__init__.py): pytest runs the project's tests/ in the target
interpreter, its exit status is the step's, and a traceback through a built variant's file
names the torch-ext/ file it was copied from."""

from __future__ import annotations

from functools import partial
import os
import sys
from pathlib import Path

import pytest

from kbuild.core.errors import BuildError
from kbuild.stages import devtest, pipeline
from kbuild_testing import make_project, kbuild as run_kbuild

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
    assert "skipped itself at import" in words  # a module-level skip also ends in exit 5
    assert devtest.status_words(0, []) is None and devtest.status_words(1, []) is None


# --- what a test run loads: exactly the variants under test (issue 48) ------------------------

LOADS = '''import kernels


def test_get_kernel_gives_the_fresh_build():
    k = kernels.get_kernel("org/demo", version=1, trust_remote_code=True)
    assert k.MARK == "fresh", k.__file__


def test_import_gives_the_fresh_build():
    import demo
    assert demo.MARK == "fresh", demo.__file__
'''


def clean_env(tmp_path, **extra: str) -> dict[str, str]:
    """No Hub, no LOCAL_KERNELS or PYTHONPATH of the caller's."""
    import os
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "KERNELS_"))}
    for var in ("LOCAL_KERNELS", "PYTHONPATH"):
        env.pop(var, None)
    return {**env, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), **extra}


kbuild = partial(run_kbuild, inherit=False, timeout=600)  # each test passes its whole environment


def this_torchs_cpu_variant() -> str:
    from kbuild.core.backend import Backend
    from kbuild.stages.plan import variant_of
    from kbuild.stages.torch_install import read_torch_install
    return variant_of(read_torch_install(sys.executable), Backend.CPU).name


@pytest.fixture
def with_leftover(tmp_path) -> Path:
    """A noarch project built for cpu and cuda (marked "fresh"), and in its build/ a leftover
    variant for this very torch (marked "stale"): an arch variant, which the loader prefers to
    a noarch one."""
    import shutil
    project = make_project(tmp_path / "demo", "[torch-noarch]\n", backends='["cpu", "cuda"]')
    (project / "build.toml").write_text((project / "build.toml").read_text().replace(
        "[torch-noarch]", '[general.hub]\nrepo-id = "org/demo"\n\n[torch-noarch]'))
    (project / "torch-ext" / "demo" / "__init__.py").write_text('MARK = "fresh"\n')
    (project / "tests").mkdir()
    (project / "tests" / "test_loads.py").write_text(LOADS)
    pipeline.build(project)
    leftover = project / "build" / this_torchs_cpu_variant()
    shutil.copytree(project / "build" / "torch-cpu", leftover)
    (leftover / "__init__.py").write_text('MARK = "stale"\n')
    return project


def test_dev_loads_the_variants_it_built_never_a_leftover_the_loader_prefers(with_leftover, tmp_path):
    import subprocess
    project, env = with_leftover, clean_env(tmp_path)
    # The loader, pointed at build/ (as kbuild dev did), picks the leftover: the test can fail.
    control = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", os.devnull,
         "--rootdir", str(project), str(project / "tests"), "-k", "get_kernel"],
        env={**env, "LOCAL_KERNELS": f"org/demo={project / 'build'}"}, cwd=project,
        capture_output=True, text=True, timeout=300)
    assert control.returncode == 1 and "assert 'stale' == 'fresh'" in control.stdout, \
        control.stdout[-3000:]

    proc = kbuild("dev", env=env, cwd=project)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "2 passed" in proc.stdout
    assert "tests load build/torch-cpu, build/torch-cuda (" in proc.stderr
    tested = sorted((project / ".kbuild" / "tested").iterdir())
    assert len(tested) == 1 and sorted(p.name for p in tested[0].iterdir()) == \
        ["torch-cpu", "torch-cuda"]


def test_test_at_one_variant_folder_tests_exactly_that_variant(with_leftover, tmp_path):
    """`--build-dir build/<variant>`: that variant, though the loader would prefer another one
    in build/; a variant the loader would not load here is refused in one line, with its
    reason."""
    import shutil
    project, env = with_leftover, clean_env(tmp_path)
    proc = kbuild("test", "--build-dir", "build/torch-cpu", env=env, cwd=project)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "tests load build/torch-cpu (" in proc.stderr and "2 passed" in proc.stdout

    other = project / "build" / "torch212-cxx11-cpu-x86_64-linux"
    shutil.copytree(project / "build" / "torch-cpu", other)
    wrong = kbuild("test", "--build-dir", other, env=env, cwd=project)
    lines = wrong.stderr.strip().splitlines()
    assert wrong.returncode == 2 and lines[0].startswith("error: ") and len(lines) == 2, lines
    assert "torch212-cxx11-cpu-x86_64-linux (Torch version (2.12) does not match" in lines[0]


def test_an_import_link_in_the_way_is_named_and_no_temporary_link_stays(with_leftover):
    project = with_leftover
    shim = project / ".kbuild" / "import"
    (shim / "demo").mkdir(parents=True)
    (shim / "demo" / "mine.txt").write_text("not kbuild's\n")
    tested = devtest.target(project, project / "build", [project / "build" / "torch-cpu"])
    with pytest.raises(BuildError) as e:
        devtest.loading_env(tested)
    assert e.value.file == shim / "demo" and "is in the way" in e.value.message
    assert sorted(p.name for p in shim.iterdir()) == ["demo"]  # the temporary link is gone
    assert (shim / "demo" / "mine.txt").read_text() == "not kbuild's\n"


def test_local_kernels_is_refused_before_anything_is_built(tmp_path):
    project = make_project(tmp_path / "demo", '[general.hub]\nrepo-id = "org/demo"\n\n'
                                              "[torch-noarch]\n", backends='["cpu"]')
    (project / "tests").mkdir()
    proc = kbuild("dev", env=clean_env(tmp_path, LOCAL_KERNELS="other/k=/x:nonsense"), cwd=project)
    assert proc.returncode == 2 and proc.stderr.startswith("error: key `LOCAL_KERNELS`: "
                                                           "LOCAL_KERNELS entry 'nonsense' is "
                                                           "not of the form repo=path"), proc.stderr
    assert not (project / "build").exists() and "tests load" not in proc.stderr


def test_an_interpreter_whose_last_line_is_not_the_answer_is_refused_in_one_line(with_leftover,
                                                                                  tmp_path):
    """`test --python PY` where PY prints a JSON value that is not select_variant.py's marked
    answer (a wrapper printing `5`, `[]` or an unmarked object last)."""
    for last in ("5", "[1, 2]", '{"chosen": ["torch-cpu"]}', "KBUILD-SELECT [1]"):
        fake = tmp_path / f"python-{len(last)}"
        fake.write_text(f"#!/bin/sh\necho '{last}'\n")
        fake.chmod(0o755)
        with pytest.raises(BuildError) as e:
            devtest.select_variants(with_leftover, with_leftover / "build", str(fake))
        assert "could not be asked which variant it loads (exit 0)" in e.value.message
        assert "\n" not in e.value.message


def test_an_empty_env_exits_2_with_one_error(tmp_path):
    project = make_project(tmp_path / "demo", "[torch-noarch]\n", backends='["cpu"]')
    (project / "tests").mkdir()
    proc = kbuild("test", "--env=", env=clean_env(tmp_path), cwd=project)
    assert proc.returncode == 2 and proc.stderr.startswith("error: --env is empty\n")
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 2


CI_TESTS = '''import os

import kernels
import pytest


@pytest.mark.kernels_ci
def test_as_upstreams_ci_test_sets_it_up():
    variant = os.environ["EXPECT_VARIANT"]
    repo, _, path = os.environ["LOCAL_KERNELS"].partition("=")
    assert repo == "org/demo" and os.path.realpath(path) == variant
    assert variant in os.environ["PYTHONPATH"].split(os.pathsep)
    k = kernels.get_kernel("org/demo", version=1, trust_remote_code=True)
    assert os.path.realpath(os.path.dirname(k.__file__)) == variant
'''


def test_ci_tests_the_best_variant_alone_as_upstream_sets_it_up(with_leftover, tmp_path):
    """`test --ci`: the best variant for this machine alone (here the arch variant, which the
    loader prefers to the noarch ones), LOCAL_KERNELS=<repo>=<it> and the variant's folder on
    PYTHONPATH as kernel-builder's ci-test sets them, `-m kernels_ci` (the two unmarked tests
    are not run); without a marked test, exit 5 is a success said in words; without tests/, a
    pass said in one line."""
    project = with_leftover
    best = project / "build" / this_torchs_cpu_variant()
    env = clean_env(tmp_path, EXPECT_VARIANT=str(best))
    none = kbuild("test", "--ci", env=env, cwd=project)
    assert none.returncode == 0, (none.stdout + none.stderr)[-3000:]
    assert f"tests load build/{best.name} (" in none.stderr
    assert "no test is marked kernels_ci (pytest exit 5)" in none.stderr

    (project / "tests" / "test_ci.py").write_text(CI_TESTS)
    proc = kbuild("test", "--ci", env=env, cwd=project)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "1 passed, 2 deselected" in proc.stdout

    import shutil
    shutil.rmtree(project / "tests")
    gone = kbuild("test", "--ci", env=env, cwd=project)
    assert gone.returncode == 0 and gone.stderr.startswith("no tests/ folder in ") and \
        len(gone.stderr.splitlines()) == 1


def test_tracebacks_through_the_tested_links_point_at_torch_ext(with_leftover):
    """The loader imports the variants through `.kbuild/tested/…`: those paths map too."""
    project = with_leftover
    variants = [project / "build" / "torch-cpu", project / "build" / "torch-cuda"]
    for chosen in (variants, variants[:1]):
        tested = devtest.target(project, project / "build", chosen)
        devtest.loading_env(tested)
        linked = tested.local_path / "torch-cpu" if len(chosen) > 1 else tested.local_path
        rewrite = devtest.path_rewriter(devtest.source_map(project, project / "build"))
        assert rewrite(f'  File "{linked}/__init__.py", line 1\n') == \
            f'  File "{project / "torch-ext" / "demo" / "__init__.py"}", line 1\n'
