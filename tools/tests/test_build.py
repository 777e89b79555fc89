"""The build pipeline end to end: layout, metadata, no-op rebuilds, clean, editions, side-by-side."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

from kbuild_testing import copy_project, fresh_copy, kbuild
from kbuild.stages import pipeline
from kbuild.stages.check import abi_problems, check_variant

CPU_VARIANT = f"torch{torch.__version__.split('.')[0]}{torch.__version__.split('.')[1]}-cxx11-cpu-x86_64-linux"


def build_cpu(project: Path, **kw):
    (result,) = pipeline.build(project, backends=["cpu"], **kw)
    return result


def built_variant(project: Path) -> tuple[Path, str]:
    """The variant folder of a built project and its kernel id."""
    (variant,) = (project / "build").iterdir()
    return variant, json.loads((variant / "metadata.json").read_text())["id"]


def test_variant_layout_and_metadata(builds):
    variant, kernel_id = built_variant(builds())  # built by pipeline.build, as build_cpu does
    assert variant.name == CPU_VARIANT
    names = sorted(p.name for p in variant.iterdir())
    assert names == sorted(["__init__.py", "_ops.py", "metadata.json", f"{kernel_id}.abi3.so"])
    meta = json.loads((variant / "metadata.json").read_text())
    assert meta["id"] == kernel_id and meta["id"].startswith("_img2gray_cpu_")
    assert meta["name"] == "img2gray" and meta["version"] == 1 and meta["license"] == "apache-2.0"
    assert meta["backend"] == {"type": "cpu"}
    assert meta["python-depends"] == [] and meta["kernel-depends"] == []
    assert "kernel" not in meta["provenance"]  # a copy outside git has no kernel commit
    ops = (variant / "_ops.py").read_text()
    assert f"torch.ops.{kernel_id}" in ops and f"from . import {kernel_id}" in ops
    # The real loader's own parser and digest agree with ours.
    from kernels._rust import Digest, DigestAlgorithm, Metadata
    Metadata.read_from_file(variant / "metadata.json")
    actual = Digest.hash_variant(DigestAlgorithm.SHA256 if hasattr(DigestAlgorithm, "SHA256")
                                 else list(DigestAlgorithm)[0], variant)
    assert actual.files == meta["digest"]["files"]
    report = check_variant(variant)
    assert report.ok and report.loaded, report.problems
    assert abi_problems(variant / f"{kernel_id}.abi3.so") == []


def test_no_op_rebuild_recompiles_nothing(project):
    first = build_cpu(project)
    work = project / ".kbuild" / CPU_VARIANT / "cmake-build"
    objects = {p: p.stat().st_mtime_ns for p in work.rglob("*.o")}
    assert objects
    second = build_cpu(project)
    assert not second.changed and second.path == first.path
    assert {p: p.stat().st_mtime_ns for p in work.rglob("*.o")} == objects
    # Touching a kernel source recompiles that source only, and keeps the id (same inputs).
    os.utime(project / "csrc" / "img2gray_cpu.cpp")
    third = build_cpu(project)
    changed = [p.name for p in work.rglob("*.o") if p.stat().st_mtime_ns != objects[p]]
    assert changed == ["img2gray_cpu.cpp.o"]
    assert third.kernel_id == first.kernel_id
    # A Python-only change gives a new id (a different build): the binding, which sees the id
    # as TORCH_EXTENSION_NAME, and the generated PyInit unit recompile; the kernels do not.
    objects = {p: p.stat().st_mtime_ns for p in work.rglob("*.o")}
    init = project / "torch-ext" / "img2gray" / "__init__.py"
    init.write_text(init.read_text() + "\n# a Python-only change\n")
    fourth = build_cpu(project)
    assert fourth.kernel_id != first.kernel_id and fourth.changed
    changed = [p.name for p in work.rglob("*.o") if p.stat().st_mtime_ns != objects[p]]
    assert sorted(changed) == ["extension.cpp.o", "torch_binding.cpp.o"]
    assert check_variant(fourth.path).ok
    # A source replaced by another file with an OLDER mtime (mv, cp -p, tar -x, rsync -a): Ninja
    # would keep the old object; the build compiles what the file now says (stages/compile/inputs.py).
    source = project / "csrc" / "img2gray_cpu.cpp"
    older = source.with_name("replacement.cpp")
    older.write_text(source.read_text() + 'extern "C" const char replaced[] = "by-an-older-file";\n')
    os.utime(older, ns=(10**18, 10**18))
    older.replace(source)
    fifth = build_cpu(project)
    assert b"by-an-older-file" in (fifth.path / f"{fifth.kernel_id}.abi3.so").read_bytes()


def test_check_detects_tampering(builds, tmp_path):
    project = fresh_copy(builds(), tmp_path / "img2gray")
    variant, _ = built_variant(project)
    (variant / "__init__.py").write_text((variant / "__init__.py").read_text() + "\n# edited\n")
    (variant / "__pycache__").mkdir()
    report = check_variant(variant, load=False)
    assert "digest: __init__.py has changed since the build" in report.problems
    assert any("__pycache__" in p for p in report.problems)
    assert kbuild("check", project).returncode == 1


def test_check_rejects_policy_violations(project, tmp_path):
    """A library built the naive way (glibc 2.32 symbol, non-abi3 Python symbols) fails `check`."""
    src = tmp_path / "bad.cpp"
    src.write_text(textwrap.dedent("""
        #include <Python.h>
        #include <memory>
        std::shared_ptr<int> keep = std::make_shared<int>(1);
        extern "C" PyObject* bad(PyObject* o) { auto c = keep; return PyList_GET_ITEM(o, 0); }
        extern "C" int refs(PyObject* o) { return (int)Py_REFCNT(o) + (int)PyFloat_AS_DOUBLE(o); }
    """))
    import sysconfig
    so = tmp_path / "bad.so"
    subprocess.run(["g++", "-O2", "-shared", "-fPIC", "-Wl,-rpath,/opt/build/tree",
                    f"-I{sysconfig.get_paths()['include']}", str(src), "-o", str(so)], check=True)
    problems = abi_problems(so)
    assert any("__libc_single_threaded" in p for p in problems), problems
    assert any("RPATH" in p for p in problems)


def test_generate_writes_build_files(project):
    proc = kbuild("generate", project, "--backend", "cpu")
    assert proc.returncode == 0, proc.stderr
    work = project / ".kbuild" / CPU_VARIANT
    for name in ("CMakeLists.txt", "plan.cmake", "registration.h", "_ops.py", "abi_shim.cpp"):
        assert (work / name).is_file(), name
    plan = (work / "plan.cmake").read_text()
    assert "KB_ID" in plan and "img2gray_cpu.cpp" in plan and "img2gray.cu" not in plan


def test_clean_removes_only_generated_files(builds, tmp_path):
    project = fresh_copy(builds(), tmp_path / "img2gray", parts=("build.toml", "csrc", "torch-ext",
                                                                  "build", ".kbuild"))
    assert (project / ".kbuild" / CPU_VARIANT / "cmake-build" / "build.ninja").is_file()
    (project / "build" / "notes.txt").write_text("keep me")
    proc = kbuild("clean", project)
    assert proc.returncode == 0, proc.stderr
    assert not (project / ".kbuild").exists()
    assert sorted(p.name for p in (project / "build").iterdir()) == ["notes.txt"]
    assert (project / "csrc" / "img2gray.cu").is_file() and (project / "build.toml").is_file()


LEGACY = """\
[general]
name = "img2gray"
universal = false

[torch]
src = ["torch-ext/torch_binding.cpp", "torch-ext/torch_binding.h"]
include = ["csrc"]

[kernel.img2gray_cpu]
backend = "cpu"
depends = []
src = ["csrc/img2gray_cpu.cpp", "csrc/img2gray.h"]

[kernel.img2gray]
backend = "cuda"
depends = ["torch"]
src = ["csrc/img2gray.cu"]
"""


def test_legacy_manifest_builds_with_warning_and_upgrades(project):
    (project / "build.toml").write_text(LEGACY)
    proc = kbuild("build", project, "--backend", "cpu")
    assert proc.returncode == 0, proc.stderr
    assert "warning" in proc.stderr and "update-build" in proc.stderr
    proc = kbuild("update-build", project)
    assert proc.returncode == 0, proc.stderr
    import tomllib
    data = tomllib.loads((project / "build.toml").read_text())
    assert data["general"]["edition"] == 5 and "universal" not in data["general"]
    assert data["general"]["backends"] == ["cpu", "cuda"] and data["general"]["version"] == 1
    assert data["kernel"]["img2gray"]["depends"] == ["torch"]
    proc = kbuild("build", project, "--backend", "cpu")
    assert proc.returncode == 0 and "warning" not in proc.stderr
    assert "already edition 5" in kbuild("update-build", project).stdout


def test_two_builds_load_side_by_side(builds, work, tmp_path):
    a = fresh_copy(builds(), tmp_path / "a")
    b = copy_project(work / "b")
    binding = b / "torch-ext" / "torch_binding.cpp"
    binding.write_text(binding.read_text() + "\n// a different build\n")
    (_, a_id), rb = built_variant(a), build_cpu(b)
    assert a_id != rb.kernel_id
    code = textwrap.dedent(f"""
        import torch, kernels
        from pathlib import Path
        ka = kernels.get_local_kernel(Path({str(a)!r}), backend="cpu")
        kb = kernels.get_local_kernel(Path({str(b)!r}), backend="cpu")
        assert ka.__name__ != kb.__name__
        x = torch.randint(0, 256, (7, 9, 3), dtype=torch.uint8)
        assert torch.equal(ka.img2gray(x), kb.img2gray(x))
        assert ka._ops.ops is not kb._ops.ops
        print(ka.__name__, kb.__name__)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [a_id, rb.kernel_id]


def test_dev_runs_the_kernel_tests(work):
    project = copy_project(work / "p")
    (project / "tests").mkdir()
    (project / "tests" / "test_smoke.py").write_text(textwrap.dedent("""
        from pathlib import Path
        import torch, kernels
        def test_smoke():
            k = kernels.get_local_kernel(Path(__file__).parents[1], backend="cpu")
            assert k.img2gray(torch.zeros(2, 2, 3, dtype=torch.uint8)).shape == (2, 2)
    """))
    proc = kbuild("dev", project, "--backend", "cpu")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout
    (project / "tests" / "test_smoke.py").write_text("def test_fails():\n    assert False\n")
    assert kbuild("dev", project, "--backend", "cpu").returncode != 0


def test_another_compiler_reconfigures(project, monkeypatch, tmp_path):
    """A cached CMake configuration is dropped when the compiler (or toolkit) changes."""
    import re
    build_cpu(project)
    stamp = project / ".kbuild" / CPU_VARIANT / "cmake-build" / "kbuild-configure.args"
    before = stamp.read_text()
    current = re.search(r"-DCMAKE_CXX_COMPILER=(\S+)", before).group(1)
    other = tmp_path / "bin" / "another-g++"  # another path to the very same compiler binary
    other.parent.mkdir()
    other.symlink_to(os.path.realpath(current))
    monkeypatch.setenv("CXX", str(other))
    monkeypatch.setenv("KBUILD_COMPILER_CACHE", "none")  # the other compiler really compiles
    result = build_cpu(project)
    after = stamp.read_text()
    assert after != before and f"-DCMAKE_CXX_COMPILER={other}" in after
    assert not result.changed  # same compiler underneath: byte-identical output


def test_a_cache_folder_that_cannot_be_written_is_warned_about_and_built_without(project, tmp_path,
                                                                                capfd, monkeypatch):
    """$KBUILD_CACHE_DIR read-only, not a folder, or full: its caches (configure seeds,
    precompiled headers, load memos) are optional, so the build goes on without them, with a
    warning that names the folder."""
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    monkeypatch.setenv("KBUILD_CACHE_DIR", str(blocked))
    result = build_cpu(project)
    assert check_variant(result.path).ok
    warned = capfd.readouterr().err
    assert f"warning: the CMake configure cache cannot be used: {blocked / 'cmake'}" in warned, warned
    assert "going on without it" in warned and "Traceback" not in warned
