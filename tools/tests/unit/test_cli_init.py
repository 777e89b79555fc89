"""`kbuild init`: the scaffold for each choice of backends is a valid, complete project; its
pixi.toml is the builder's matrix; nothing is ever overwritten."""

from __future__ import annotations

import ast
import json
import tomllib
from pathlib import Path

import pytest

from kbuild import scaffold as init_cli
from kbuild.core import manifest
from kbuild.core.errors import BuildError
from kbuild.matrix import matrix
from kbuild_testing import invoke

SCHEMA = Path(__file__).parents[1] / "data" / "pixi-manifest-schema-v0.77.0.json"


def make(tmp_path: Path, name: str = "my-kernel", backends=("cpu", "cuda"), noarch=False) -> Path:
    opts = init_cli.InitOptions(name=name, repo_id=f"org/{name}", backends=tuple(backends),
                                noarch=noarch)
    target = tmp_path / name
    init_cli.create(target, opts, git=False)
    return target


@pytest.mark.parametrize("backends", [("cpu", "cuda"), ("cpu",), ("cuda",)], ids="+".join)
def test_compiled_scaffold_is_a_valid_project(tmp_path, backends):
    project = make(tmp_path, backends=backends)
    m = manifest.load(project)  # every listed source exists, torch-ext/<module>/ too
    assert m.general.name == "my-kernel" and m.general.backends == list(backends)
    assert m.general.hub.repo_id == "org/my-kernel"
    assert {k.backend for k in m.kernel.values()} == set(backends)
    assert all(k.depends == [] for k in m.kernel.values())  # torch-free kernels
    binding = (project / "torch-ext" / "torch_binding.cpp").read_text()
    assert "TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops)" in binding
    assert "REGISTER_EXTENSION(TORCH_EXTENSION_NAME)" in binding and '#include "registration.h"' in binding
    assert 'ops.def("my_kernel(Tensor! out, Tensor x, float negative_slope) -> ()")' in binding
    assert ("c10::kCPU" in binding) == ("cpu" in backends)
    assert ("c10::kCUDA" in binding) == ("cuda" in backends)
    assert (project / "csrc" / "my_kernel_cuda.cu").exists() == ("cuda" in backends)
    assert (project / "csrc" / "my_kernel_cpu.cpp").exists() == ("cpu" in backends)
    for py in project.rglob("*.py"):
        ast.parse(py.read_text(), filename=str(py))
    init = (project / "torch-ext" / "my_kernel" / "__init__.py").read_text()
    assert '@_register_fake("my_kernel")' in init  # once per process, in the op's namespace
    assert "qualname = add_op_namespace_prefix(name)" in init
    assert "return torch.library.register_fake(qualname)" in init
    tests = (project / "tests" / "test_my_kernel.py").read_text()
    assert "torch.library.opcheck" in tests and "fullgraph=True" in tests and "assert_close" in tests
    assert json.loads(_conftest_backends(project)) == list(backends)
    assert (project / "benchmarks" / "benchmark_my_kernel.py").is_file()
    assert (project / "CARD.md").read_text().startswith("---\nlicense: apache-2.0\n")


def _conftest_backends(project: Path) -> str:
    line = next(ln for ln in (project / "tests" / "conftest.py").read_text().splitlines()
                if ln.startswith("BACKENDS = "))
    return line.removeprefix("BACKENDS = ")


def test_noarch_scaffold(tmp_path):
    project = make(tmp_path, name="tiny-op", noarch=True)
    m = manifest.load(project)
    assert m.is_noarch and m.general.backends == ["cpu", "cuda"] and not m.kernel
    assert not (project / "csrc").exists() and not (project / "torch-ext" / "torch_binding.cpp").exists()
    init = (project / "torch-ext" / "tiny_op" / "__init__.py").read_text()
    assert 'custom_op(add_op_namespace_prefix("tiny_op"), mutates_args=("out",))' in init
    assert "register_fake" in init


def test_pixi_toml_is_the_builders_matrix_for_the_new_project(tmp_path):
    import jsonschema

    project = make(tmp_path)
    ours = matrix.load(project)
    default = matrix.load(init_cli.DEFAULT_MATRIX)
    assert [e.name for e in ours.envs] == [e.name for e in default.envs]
    assert [e.variant() for e in ours.envs] == [e.variant() for e in default.envs]
    raw = tomllib.loads((project / "pixi.toml").read_text())
    assert raw["workspace"]["name"] == "my-kernel"
    builder = raw["pypi-dependencies"]["pixi-kernel-builder"]
    assert Path(builder["path"]) == init_cli.builder_source() and builder["editable"] is True
    assert (Path(builder["path"]) / "kbuild" / "cli" / "init.py").is_file()
    assert raw["tasks"]["dev"]["cmd"].startswith("kbuild dev")
    errors = list(jsonschema.Draft7Validator(json.loads(SCHEMA.read_text())).iter_errors(raw))
    assert not errors, [e.message[:200] for e in errors]


def test_refuses_an_existing_folder_and_leaves_it_alone(tmp_path):
    target = tmp_path / "my-kernel"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    result = invoke("init", "my-kernel", cwd=tmp_path)
    assert isinstance(result.exception, BuildError)
    assert "already exists" in str(result.exception) and "\n" not in str(result.exception)
    assert sorted(p.name for p in target.iterdir()) == ["notes.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my-kernel"]  # no staging left over


def test_an_empty_folder_is_filled(tmp_path):
    (tmp_path / "my-kernel").mkdir()
    result = invoke("init", "my-kernel", "--backends", "cpu", "--no-git", cwd=tmp_path)
    assert result.exit_code == 0, result.output
    assert manifest.load(tmp_path / "my-kernel").general.backends == ["cpu"]
    assert "created" in result.output and "kbuild dev" in result.output


@pytest.mark.parametrize("args, words", [
    (["My_Kernel"], "not a kernel name"),
    (["9lives"], "not a kernel name"),
    (["ok-name", "--backends", "cpu,metal"], "the scaffold has kernels for cpu and cuda"),
    (["ok-name", "--repo-id", "noslash"], "expected org/name"),
])
def test_bad_arguments_are_one_clear_error(tmp_path, args, words):
    result = invoke("init", *args, cwd=tmp_path)
    assert isinstance(result.exception, BuildError), result.output
    assert words in str(result.exception)
    assert list(tmp_path.iterdir()) == []


def test_underscores_become_dashes_and_git_stages_the_files(tmp_path):
    result = invoke("init", "fast_norm", "--backends", "cuda", cwd=tmp_path)
    assert result.exit_code == 0, result.output
    project = tmp_path / "fast_norm"
    assert manifest.load(project).general.name == "fast-norm"
    assert (project / "torch-ext" / "fast_norm" / "__init__.py").is_file()
    if (project / ".git").is_dir():  # git is optional for init
        from kbuild.core.runner import capture
        staged = capture(["git", "-C", str(project), "diff", "--cached", "--name-only"]).stdout
        assert "build.toml" in staged.split() and "pixi.toml" in staged.split()


def test_a_bare_matrix_gets_the_builder_and_the_tasks_and_its_locks_come_along(tmp_path):
    """A default matrix without tasks or a builder dependency (as one shipped with the builder
    may be), with environment locks next to it."""
    import tomlkit

    doc = tomlkit.parse(init_cli.DEFAULT_MATRIX.read_text())
    doc.pop("tasks", None)
    doc.get("pypi-dependencies", {}).pop("pixi-kernel-builder", None)
    source = tmp_path / "matrix"
    (source / "locks" / "linux-64").mkdir(parents=True)
    (source / "locks" / "linux-64" / "torch214-cpu.pylock.toml").write_text("lock-version = '1.0'\n")
    (source / "pixi.toml").write_text("# the builder's own comment\n" + tomlkit.dumps(doc))
    opts = init_cli.InitOptions("my-kernel", "org/my-kernel", ("cpu",), False)
    target = tmp_path / "my-kernel"
    init_cli.create(target, opts, git=False, matrix_file=source / "pixi.toml")
    text = (target / "pixi.toml").read_text()
    raw = tomllib.loads(text)
    assert "the builder's own comment" not in text
    assert set(raw["tasks"]) == {"dev", "build", "build-all", "upload", "test"}
    assert raw["tasks"]["dev"]["cmd"] == "kbuild dev"
    assert raw["pypi-dependencies"]["pixi-kernel-builder"]["editable"] is True
    assert (target / "locks" / "linux-64" / "torch214-cpu.pylock.toml").is_file()
    assert [e.name for e in matrix.load(target).envs] == [e.name for e in matrix.load(source).envs]
