"""kernel-builder's flags (issue 46): `--variant NAME` builds exactly that variant — the target
torch's, or a matrix environment's, realised as --env does — and a name the project does not
make is one error listing those it makes, before anything is realised or compiled;
`--max-jobs`/`--cores` (nix's meaning: builds at once, cores per build) reach the compile's
split and build-all; `-L` streams every line. In process; no compiler runs."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from kbuild.cli import build as build_cli
from kbuild.core.errors import BuildError
from kbuild.matrix import buildall, choose, matrix
from kbuild.stages import compile as comp
from kbuild.stages import pipeline
from kbuild_testing import REPO, copy_project, fake_toolkit, invoke, make_probe_project, plan_of

THIS_TORCH = (f"torch{torch.__version__.split('.')[0]}{torch.__version__.split('.')[1]}"
              "-cxx11-cpu-x86_64-linux")
NOARCH = """[general]
name = "tri"
version = 1
license = "mit"
backends = ["cpu", "cuda"]

[torch-noarch]
"""


@pytest.fixture
def project(tmp_path) -> Path:
    return copy_project(tmp_path / "img2gray", REPO)  # cpu + cuda, the default matrix


@pytest.fixture
def calls(monkeypatch) -> dict:
    """What `kbuild build` would realise and build (nothing is)."""
    seen: dict = {}

    def realised(project, env, python, **kw):
        seen["env"] = env
        return python, None

    def run(project, backend, python, *args, **kw):
        seen.update(backend=backend, **kw)
        return []
    monkeypatch.setattr(build_cli, "realised_python", realised)
    monkeypatch.setattr(build_cli, "run_build", run)
    return seen


def a_matrix_variant(project: Path) -> choose.Choice:
    """A variant of the default matrix that this torch does not make."""
    return next(c for n, c in sorted(choose.matrix_variants(project).items()) if n != THIS_TORCH)


def test_this_torchs_variant_is_built_here(project, calls):
    assert choose.choose(project, THIS_TORCH) == choose.Choice(THIS_TORCH, "cpu", None)
    result = invoke("build", str(project), "--variant", THIS_TORCH)
    assert result.exit_code == 0, result.output
    assert calls["env"] is None and calls["backend"] == ["cpu"] and calls["variant"] == THIS_TORCH


def test_a_matrix_variant_is_built_in_its_environment(project, calls):
    other = a_matrix_variant(project)
    assert other.env and choose.choose(project, other.name) == other
    result = invoke("build", str(project), "--variant", other.name)
    assert result.exit_code == 0, result.output
    assert calls["env"] == other.env and calls["backend"] == [other.backend]
    assert calls["variant"] == other.name


def test_a_name_the_project_does_not_make_is_one_error_listing_those_it_makes(project, calls):
    result = invoke("build", str(project), "--variant", "torch29-cxx11-cu999-x86_64-linux")
    error = result.exception
    assert isinstance(error, BuildError) and calls == {}  # nothing realised, nothing built
    assert "makes no variant 'torch29-cxx11-cu999-x86_64-linux'" in error.message
    assert error.file == project.resolve() / "build.toml"
    listed = error.hint.removeprefix("variants it makes: ").split(", ")
    assert listed[0] == THIS_TORCH and a_matrix_variant(project).name in listed
    assert len(listed) == len(set(listed)) > 2
    # Narrowed by --env or --python: only what that environment or that torch makes.
    env = a_matrix_variant(project).env
    with pytest.raises(BuildError) as info:
        choose.choose(project, THIS_TORCH, env=env)
    assert info.value.hint == f"variants it makes: {a_matrix_variant(project).name}"
    with pytest.raises(BuildError) as info:
        choose.choose(project, a_matrix_variant(project).name, explicit_python=True)
    assert info.value.hint == f"variants it makes: {THIS_TORCH}"


def test_variant_and_backend_exclude_each_other(project, calls):
    result = invoke("build", str(project), "--variant", THIS_TORCH, "--backend", "cpu")
    assert isinstance(result.exception, BuildError) and calls == {}
    assert "--variant and --backend" in result.exception.message


def test_a_noarch_project_builds_exactly_the_variant_asked_for(tmp_path):
    project = tmp_path / "tri"
    (project / "torch-ext" / "tri").mkdir(parents=True)
    (project / "torch-ext" / "tri" / "__init__.py").write_text("")
    (project / "build.toml").write_text(NOARCH)
    result = invoke("build", str(project), "--variant", "torch-cuda")
    assert result.exit_code == 0, result.output
    assert [p.name for p in (project / "build").iterdir()] == ["torch-cuda"]
    # The pipeline itself refuses a name its plans do not make, before building anything.
    with pytest.raises(BuildError, match="makes no variant 'torch-xpu'") as info:
        pipeline.build(project, variant="torch-xpu", build_dir=tmp_path / "elsewhere")
    assert info.value.hint == "it makes torch-cpu, torch-cuda"
    assert not (tmp_path / "elsewhere").exists()


def test_cores_and_print_build_logs_reach_the_build(project, calls):
    result = invoke("build", str(project), "--max-jobs", "2", "--cores", "3", "-L")
    assert result.exit_code == 0, result.output
    assert calls["cores"] == 3 and calls["print_build_logs"] is True


def test_dev_takes_the_same_flags(project, calls):
    """`kbuild dev` passes them to its build (nothing is built: run_build stands in and returns
    no variant, which dev refuses after the build) and refuses an unknown name before it."""
    other = a_matrix_variant(project)
    (project / "tests").mkdir(exist_ok=True)
    result = invoke("dev", str(project), "--variant", other.name, "--cores", "3", "-L")
    assert isinstance(result.exception, BuildError), result.output
    assert result.exception.message == "nothing was built to test"
    assert calls["env"] == other.env and calls["backend"] == [other.backend]
    assert calls["variant"] == other.name and calls["cores"] == 3
    assert calls["print_build_logs"] is True
    calls.clear()
    result = invoke("dev", str(project), "--variant", "torch29-cxx11-cu999-x86_64-linux")
    assert "makes no variant" in result.exception.message and calls == {}
    result = invoke("dev", str(project), "--max-jobs", "0")
    assert isinstance(result.exception, BuildError) and calls == {}


def test_cores_is_the_budget_the_compile_divides(tmp_path, monkeypatch):
    """--cores N: Ninja jobs and nvcc threads per file within N, as nix-builder divides
    NIX_BUILD_CORES; 0 is all of this machine's."""
    monkeypatch.setenv("KBUILD_COMPILER_CACHE", "none")
    monkeypatch.delenv("KBUILD_NVCC_THREADS", raising=False)
    plan = dataclasses.replace(plan_of(make_probe_project(tmp_path / "p")),
                               cuda=fake_toolkit("13.0", ["8.0", "9.0"]),
                               kernels={"k": SimpleNamespace(backend="cuda", src=["k.cu"])},
                               kernel_archs={"k": ["7.5", "8.0", "8.6", "8.9", "9.0", "10.0"]})
    for cores in (1, 3, 64):
        how = comp.split(plan, cores=cores, memory_gib=500)
        assert how.cores == cores and how.nvcc_threads <= cores and how.jobs <= cores
        args = comp.configure_args(plan, tmp_path, tmp_path, cores=cores)
        assert f"-DKB_NVCC_THREADS={how.nvcc_threads}" in args
    assert comp.split(plan, cores=0).cores == comp._cores()


def test_build_all_takes_the_same_flags(project, monkeypatch):
    seen = {}
    monkeypatch.setattr(buildall.Runner, "run", lambda self, specs: seen.update(
        opts=self.opts, specs=[s.name for s in specs]) or [])
    other = a_matrix_variant(project)
    result = invoke("build-all", str(project), "--via", "pypi", "--variant", other.name,
                    "--max-jobs", "2", "--cores", "4", "-L")
    assert result.exit_code == 0, result.output
    assert seen["specs"] == [other.env]
    assert (seen["opts"].jobs, seen["opts"].cores, seen["opts"].print_build_logs) == (2, 4, True)
    result = invoke("build-all", str(project), "--max-jobs", "2", "--jobs", "3")
    assert isinstance(result.exception, BuildError) and "disagree" in result.exception.message
    result = invoke("build-all", str(project), "--via", "pypi", "--variant", "torch-cpu")
    assert isinstance(result.exception, BuildError)
    assert result.exception.hint.startswith("variants it makes: ")


def test_build_all_passes_them_to_each_environments_build(project, tmp_path):
    runner = buildall.Runner(project, matrix.load(project),
                             buildall.Options(via="pypi", cores=4, print_build_logs=True),
                             lambda *a: None)
    commands = []
    runner._call = lambda name, cmd, log, env=None, progress=False: commands.append(cmd) or 0
    spec = runner.matrix.select(["torch213-cpu"])[0]
    from kbuild.matrix import realise
    runner._build(realise.RealisedEnv(spec, "key", "python"), tmp_path / "log")
    (cmd,) = commands
    assert cmd[cmd.index("--cores") + 1] == "4" and "--print-build-logs" in cmd
    assert "--jobs" not in cmd  # the environment's build divides its cores itself


def test_build_all_streams_each_builds_lines_as_they_come(project, tmp_path):
    events = []
    runner = buildall.Runner(project, matrix.load(project),
                             buildall.Options(via="pypi", print_build_logs=True),
                             lambda env, stage, fields: events.append((env, stage, fields)))
    log = tmp_path / "env.log"
    log.write_bytes(b"v> [1/2] Building a\nv> [2/2] Linking\nv> half a li")
    shown = runner._output("env", log, 0)
    assert [f["line"] for _, s, f in events if s == "output"] == ["v> [1/2] Building a",
                                                                 "v> [2/2] Linking"]
    with log.open("ab") as f:
        f.write(b"ne\n")
    runner._output("env", log, shown, final=True)
    assert events[-1] == ("env", "output", {"line": "v> half a line"})


def test_step_display_prints_a_build_line_with_its_variant(capsys):
    from rich.console import Console
    from kbuild.cli.app import StepDisplay
    console = Console(file=None, force_terminal=False, width=200)
    with StepDisplay(console=console, live=False) as display:
        display.output("torch213-cxx11-cpu-x86_64-linux", "warning: unused variable")
    assert "torch213-cxx11-cpu-x86_64-linux> warning: unused variable" in capsys.readouterr().out
