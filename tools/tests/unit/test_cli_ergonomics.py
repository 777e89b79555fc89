"""CLI ergonomics: the project is found from any folder inside it, `dev -- ARGS` reaches pytest,
tables fold instead of cutting names, tracebacks map to torch-ext/, progress, --version."""

from __future__ import annotations

from types import SimpleNamespace

import importlib
import io
import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from kbuild import __version__
from kbuild.stages import devtest, pipeline
from kbuild.cli import app
from kbuild.cli import build as build_cli
from kbuild.core.errors import BuildError
from kbuild_testing import invoke

app_mod = importlib.import_module("kbuild.cli.app")  # the module (kbuild.cli.app is the Typer)
LONG_VARIANT = "torch214-cxx11-cu130-x86_64-linux"


@pytest.fixture
def tree(tmp_path) -> Path:
    """A project with a (fake) built variant, generated files and a nested source folder."""
    project = tmp_path / "proj"
    (project / "csrc" / "deep").mkdir(parents=True)
    (project / "build.toml").write_text("[general]\n")
    variant = project / "build" / LONG_VARIANT
    variant.mkdir(parents=True)
    (variant / "metadata.json").write_text(json.dumps({"name": "proj"}))
    (project / ".kbuild" / "x").mkdir(parents=True)
    return project


def test_find_project_walks_up_and_explains_when_there_is_none(tree, tmp_path):
    assert app_mod.find_project(tree / "csrc" / "deep") == tree
    assert app_mod.find_project(tree) == tree
    with pytest.raises(BuildError, match="no build.toml here or in any folder above") as e:
        app_mod.find_project(tmp_path)
    assert "kbuild init" in e.value.hint


def test_clean_from_a_subfolder_cleans_the_project(tree):
    result = invoke("clean", cwd=tree / "csrc" / "deep")
    assert result.exit_code == 0, result.output
    assert not (tree / ".kbuild").exists() and not (tree / "build").exists()
    assert (tree / "csrc" / "deep").is_dir() and (tree / "build.toml").is_file()


def test_check_from_a_subfolder_finds_build_and_folds_names_at_80_columns(tree, monkeypatch):
    monkeypatch.setattr(app_mod.out, "width", 80)
    result = invoke("check", "--no-load", cwd=tree / "csrc")
    assert result.exit_code == 1  # the fake variant fails its checks, but it was found
    assert LONG_VARIANT in result.output  # on one line
    assert "…" not in result.output  # nothing cut
    table = [line for line in result.output.splitlines() if line[:1] in "┏┃┡│└"]
    assert table and max(len(line) for line in table) <= 80  # (notes naming paths may be longer)


def test_table_folds_long_words_instead_of_cutting():
    console = Console(file=io.StringIO(), width=20)
    t = app_mod.table("variant")
    t.add_row(LONG_VARIANT)
    console.print(t)
    text = console.file.getvalue()
    assert "…" not in text
    body = [line.strip("│ ") for line in text.splitlines()[3:-1]]  # the cell's lines
    assert "".join(body) == LONG_VARIANT


def test_off_terminal_width_follows_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert app_mod._width(False) == 80
    monkeypatch.delenv("COLUMNS")
    assert app_mod._width(False) == app_mod.LOG_WIDTH


def test_dev_passes_everything_after_double_dash_to_pytest(tree, monkeypatch):
    seen = {}
    built = SimpleNamespace(variant="torch-cpu", path=tree / "build" / "torch-cpu")
    monkeypatch.setattr(build_cli, "run_build",
                        lambda project, *a, **k: seen.update(project=project) or [built])
    monkeypatch.setattr(devtest, "run_tests", lambda project, python, args, **kw: seen.update(
        args=args, tested=kw["tested"].variants) or 0)
    (tree / "tests").mkdir()
    (tree / "build.toml").write_text('[general]\nname = "proj"\nversion = 1\nlicense = "mit"\n'
                                     'backends = ["cpu"]\n[torch-noarch]\n')
    (tree / "torch-ext" / "proj").mkdir(parents=True)
    (tree / "torch-ext" / "proj" / "__init__.py").write_text("")
    result = invoke("dev", "--", "-k", "x", "-x", cwd=tree / "csrc")
    assert result.exit_code == 0, result.output
    assert seen == {"project": tree, "args": ["-k", "x", "-x"], "tested": (built.path,)}
    result = invoke("dev", str(tree), "--backend", "cpu", cwd=tree.parent)
    assert result.exit_code == 0 and seen["args"] == []


def test_tracebacks_through_a_built_variant_point_at_torch_ext(tmp_path):
    project = tmp_path / "pk"
    (project / "torch-ext" / "pk").mkdir(parents=True)
    (project / "torch-ext" / "pk" / "__init__.py").write_text("")
    (project / "torch-ext" / "pk" / "layers.py").write_text("")
    (project / "build.toml").write_text(
        '[general]\nname = "pk"\nversion = 1\nlicense = "mit"\nbackends = ["cpu"]\n[torch-noarch]\n')
    variant = project / "build" / "torch-cpu"
    variant.mkdir(parents=True)
    for name in ("__init__.py", "layers.py", "_ops.py", "metadata.json"):
        (variant / name).write_text("{}")
    rewrite = devtest.path_rewriter(devtest.source_map(project, project / "build"))
    src = project / "torch-ext" / "pk"
    assert rewrite(f'  File "{variant}/layers.py", line 3, in f\n') == \
        f'  File "{src}/layers.py", line 3, in f\n'
    assert rewrite("build/torch-cpu/__init__.py:12: in g") == "torch-ext/pk/__init__.py:12: in g"
    assert rewrite("build/torch-cpu/_ops.py:4: in h") == "build/torch-cpu/_ops.py:4: in h"  # generated


def test_version():
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.startswith(f"kbuild {__version__} ")


def test_ninja_lines_become_steps_with_the_project_relative_file(tmp_path):
    project = Path("/work/proj")
    assert pipeline.ninja_file(
        "Building CUDA object CMakeFiles/kernel_k.dir/work/proj/csrc/k.cu.o", project) == "csrc/k.cu"
    assert pipeline.ninja_file("Building CXX object CMakeFiles/extension.dir/extension.cpp.o",
                               project) == "extension.cpp"
    assert pipeline.ninja_file("Linking CXX shared module _k_cpu_1.abi3.so", project) == \
        "linking _k_cpu_1.abi3.so"


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_plain_progress_is_sparse_but_never_silent():
    buf = io.StringIO()
    display = app_mod.StepDisplay(Console(file=buf, width=200), live=False)
    display.clock = clock = FakeClock()
    display.last_print = 0.0
    step = pipeline.Step
    display(step("v", "generate"))
    display(step("v", "configure"))
    display(step("v", "compile"))
    for i, t in enumerate([1, 2, 7, 8], start=1):
        clock.now = t
        display(step("v", "compile", f"f{i}.cpp", i, 5))
    clock.now = 9
    display(step("v", "compile", "linking", 5, 5))
    clock.now = 30
    display(step("v", "load"))
    lines = buf.getvalue().splitlines()
    assert lines == ["v: configuring (CMake)", "v: compiling", "[3/5] f3.cpp (v)",
                     "[5/5] linking (v)", "v: checking that the extension loads"]
    clock.now = 40
    display.beat()
    assert buf.getvalue().splitlines()[-1] == "v: checking that the extension loads"  # 10 s: quiet
    clock.now = 50
    display.beat()
    assert buf.getvalue().splitlines()[-1] == "v: still checking that the extension loads (20s)"


@pytest.mark.parametrize("argv, table", [(["build", "--help"], "[dist]"),
                                         (["init", "--help"], "[torch-noarch]"),
                                         (["upload", "--help"], "[general.hub]"),
                                         (["matrix", "update", "--help"], "[tool.kbuild.update]")])
def test_help_keeps_toml_table_names(argv, table):
    """Help texts name TOML tables in brackets; they are shown, not read as markup and dropped."""
    result = CliRunner().invoke(app, argv, env={"COLUMNS": "400"})
    assert result.exit_code == 0
    assert table in result.output
