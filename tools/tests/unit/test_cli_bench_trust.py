"""`kbuild bench` runs only files of the project, and only against a complete variant (issue 21,
item 7): a benchmark that is a symlink out of the project is refused (as for torch-ext/), and
--variant-dir must pass `kbuild check`'s file checks. Nothing is run when refused. In process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbuild.cli import app
from kbuild.core.errors import BuildError
from kbuild.stages.assemble import digest_files

COMPILED = "torch213-cxx11-cpu-x86_64-linux"


def project(root: Path) -> Path:
    (root / "benchmarks").mkdir(parents=True)
    (root / "build.toml").write_text('[general]\nname = "tiny"\nbackends = ["cpu"]\n')
    return root


def runaway(tmp_path: Path) -> tuple[Path, Path]:
    """A script outside the project that leaves a mark when it runs, and the mark."""
    mark = tmp_path / "ran"
    script = tmp_path / "outside" / "evil.py"
    script.parent.mkdir()
    script.write_text(f"open({str(mark)!r}, 'w').write('ran')\n")
    return script, mark


def variant(root: Path, name: str = COMPILED, so: bool = False) -> Path:
    """A variant folder as assembled (metadata with its digest), with or without its .so."""
    folder = root / "build" / name
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    (folder / "_ops.py").write_text("")
    if so:
        (folder / "_tiny_cpu_abc1234.abi3.so").write_bytes(b"not an ELF file")
    meta = {"name": "tiny", "id": "_tiny_cpu_abc1234", "version": 1, "license": "apache-2.0",
            "python-depends": [], "kernel-depends": [], "backend": {"type": "cpu"},
            "digest": {"algorithm": "sha256", "files": digest_files(folder)}}
    (folder / "metadata.json").write_text(json.dumps(meta))
    return folder


def bench(root: Path, *args: str):
    return CliRunner().invoke(app, ["bench", str(root), "--device", "cpu", *args])


def test_a_benchmark_linked_out_of_the_project_is_refused(tmp_path):
    root = project(tmp_path / "p")
    script, mark = runaway(tmp_path)
    (root / "benchmarks" / "benchmark_evil.py").symlink_to(script)
    result = bench(root, "--variant-dir", str(variant(root, so=True)))
    assert isinstance(result.exception, BuildError), result.output
    assert "benchmarks/benchmark_evil.py leads to" in result.exception.message
    assert "outside the project" in result.exception.message
    assert not mark.exists()


def test_a_benchmarks_folder_linked_out_of_the_project_is_refused(tmp_path):
    root = project(tmp_path / "p")
    script, mark = runaway(tmp_path)
    (root / "benchmarks").rmdir()
    (script.parent / "benchmark_x.py").symlink_to(script.name)
    (root / "benchmarks").symlink_to(script.parent)
    result = bench(root, "--variant-dir", str(variant(root, so=True)))
    assert isinstance(result.exception, BuildError) and "outside the project" in str(result.exception)
    assert not mark.exists()


def test_a_link_inside_the_project_is_fine(tmp_path):
    root = project(tmp_path / "p")
    (root / "scripts").mkdir()
    (root / "scripts" / "b.py").write_text("")
    (root / "benchmarks" / "benchmark_b.py").symlink_to("../scripts/b.py")
    from kbuild.bench import find_benchmarks
    assert find_benchmarks(root.resolve()) == [root.resolve() / "benchmarks" / "benchmark_b.py"]


@pytest.mark.parametrize("make, words", [
    (lambda root: variant(root), "expected exactly _tiny_cpu_abc1234.abi3.so"),
    (lambda root: (root / "build" / "empty").mkdir(parents=True) or root / "build" / "empty",
     "not a built variant"),
    (lambda root: variant(root).parent, "expected exactly _tiny_cpu_abc1234.abi3.so"),  # a folder of them
], ids=["variant without .so", "empty folder", "folder of variants"])
def test_an_incomplete_variant_is_refused_before_anything_runs(tmp_path, make, words):
    root = project(tmp_path / "p")
    mark = tmp_path / "ran"
    (root / "benchmarks" / "benchmark_tiny.py").write_text(f"open({str(mark)!r}, 'w').write('ran')\n")
    result = bench(root, "--variant-dir", str(make(root)))
    assert isinstance(result.exception, BuildError), result.output
    assert words in result.exception.message and "\n" not in result.exception.message
    assert not mark.exists() and not (root / ".kbuild" / "bench").exists()
