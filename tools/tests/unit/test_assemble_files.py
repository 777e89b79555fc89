"""assemble: pyext decides which package files ship (compiled variants too), symlinks that leave
the project are refused, and a failed staging (disk full) leaves nothing behind and names the
file it could not write."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from kbuild.stages import assemble
from kbuild.core.errors import BuildError
from kbuild_testing import make_probe_project, plan_of


def package(project: Path) -> Path:
    return project / "torch-ext" / "probe"


def shipped(project: Path) -> list[str]:
    return [rel for _, rel in assemble.python_files(plan_of(project))]


def test_compiled_variants_ship_python_and_pyext_data_only(tmp_path):
    project = make_probe_project(tmp_path / "p", torch_extra={"pyext": ["py", "json"]}, files={
        "torch-ext/probe/layers.py": "", "torch-ext/probe/data/table.json": "{}",
        "torch-ext/probe/README.md": "", "torch-ext/probe/stale.so": "", "torch-ext/probe/t.pyi": "",
        "torch-ext/probe/_ops.py": "# stale", "torch-ext/probe/__pycache__/x.pyc": ""})
    assert shipped(project) == ["__init__.py", "data/table.json", "layers.py"]


def test_default_pyext_ships_stubs(tmp_path):
    project = make_probe_project(tmp_path / "p", files={"torch-ext/probe/t.pyi": "",
                                                  "torch-ext/probe/notes.txt": ""})
    assert shipped(project) == ["__init__.py", "t.pyi"]


def test_symlink_leaving_the_project_is_refused(tmp_path):
    secret = tmp_path / "secret.py"
    secret.write_text("TOKEN = 'x'\n")
    project = make_probe_project(tmp_path / "p")
    os.symlink(secret, package(project) / "leak.py")
    with pytest.raises(BuildError) as e:
        assemble.python_files(plan_of(project))
    assert "outside the project" in e.value.message and Path(e.value.file).name == "leak.py"


def test_symlinked_folder_leaving_the_project_is_refused(tmp_path):
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "mod.py").write_text("")
    project = make_probe_project(tmp_path / "p")
    os.symlink(tmp_path / "outside", package(project) / "sub")
    with pytest.raises(BuildError, match="outside the project"):
        assemble.python_files(plan_of(project))


def test_symlink_inside_the_project_ships_its_content(tmp_path):
    project = make_probe_project(tmp_path / "p", files={"shared/util.py": "X = 1\n"})
    os.symlink(project / "shared" / "util.py", package(project) / "util.py")
    os.symlink(package(project), package(project) / "loop")  # a loop is walked once
    assert shipped(project) == ["__init__.py", "util.py"]


def test_disk_full_removes_staging_and_names_the_destination(tmp_path, monkeypatch):
    project = make_probe_project(tmp_path / "p", files={"torch-ext/probe/big.py": "x" * 100})
    plan = plan_of(project)
    work = tmp_path / "work"
    work.mkdir()
    (work / "_ops.py").write_text("")
    real = assemble.shutil.copyfile

    def copyfile(src, dest):
        if Path(dest).name == "big.py":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(src, dest)

    monkeypatch.setattr(assemble.shutil, "copyfile", copyfile)
    staging = tmp_path / "staging"
    with pytest.raises(BuildError) as e:
        assemble.stage(plan, work, None, staging)
    assert "disk full" in e.value.message
    assert Path(e.value.file) == staging / f"{plan.name}.{os.getpid()}" / "big.py"
    assert list(staging.iterdir()) == []


def test_any_failure_while_staging_removes_it(tmp_path, monkeypatch):
    project = make_probe_project(tmp_path / "p")
    plan = plan_of(project)
    work = tmp_path / "work"
    work.mkdir()
    (work / "_ops.py").write_text("")
    monkeypatch.setattr(assemble, "metadata", lambda *a: (_ for _ in ()).throw(RuntimeError("x")))
    with pytest.raises(RuntimeError):
        assemble.stage(plan, work, None, tmp_path / "staging")
    assert list((tmp_path / "staging").iterdir()) == []
