"""`kbuild clean` never follows a symlink out of the project (build/, .kbuild/, a variant)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbuild.cli.build import clean


def fake_variant(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "metadata.json").write_text("{}")
    (folder / "__init__.py").write_text("")
    return folder


def test_clean_leaves_what_symlinks_point_to(tmp_path, monkeypatch):
    warnings: list[str] = []
    monkeypatch.setattr("kbuild.cli.build.warn", warnings.append)
    outside = tmp_path / "elsewhere"
    precious = fake_variant(outside / "builds" / "torch213-cxx11-cpu-x86_64-linux")
    other_work = outside / "work"
    (other_work / "x").mkdir(parents=True)
    linked_variant = fake_variant(outside / "one" / "torch212-cxx11-cpu-x86_64-linux")

    project = tmp_path / "project"
    project.mkdir()
    (project / "build").symlink_to(outside / "builds")
    (project / ".kbuild").symlink_to(other_work)
    clean(project)
    assert precious.is_dir() and (other_work / "x").is_dir()
    assert (project / "build").is_symlink() and (project / ".kbuild").is_symlink()
    assert len(warnings) == 2 and all("symlink" in w for w in warnings)

    (project / "build").unlink()
    real = fake_variant(project / "build" / "torch213-cxx11-cpu-x86_64-linux")
    (project / "build" / linked_variant.name).symlink_to(linked_variant)
    clean(project)
    assert not real.exists() and linked_variant.is_dir()
    assert (project / "build" / linked_variant.name).is_symlink()



def project_with_mount(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A project whose .kbuild/envs is to be a mount point of `outside`."""
    outside = tmp_path / "outside"
    (outside / "env").mkdir(parents=True)
    (outside / "env" / "python").write_text("precious")
    project = tmp_path / "project"
    (project / ".kbuild" / "envs").mkdir(parents=True)
    (project / ".kbuild" / "variant" / "cmake-build").mkdir(parents=True)
    (project / ".kbuild" / "variant" / "build.log").write_text("")
    fake_variant(project / "build" / "torch213-cxx11-cpu-x86_64-linux")
    return project, project / ".kbuild" / "envs", outside


def test_clean_does_not_cross_into_a_mount_point(tmp_path, monkeypatch):
    """A folder mounted inside .kbuild/ (a bind mount has the same device as its parent, so the
    mount table says it): left as it is and named; everything else goes."""
    from kbuild.core import removal
    warnings: list[str] = []
    monkeypatch.setattr("kbuild.cli.build.warn", warnings.append)
    project, envs, outside = project_with_mount(tmp_path)
    (envs / "env").mkdir()
    (envs / "env" / "python").write_text("precious")  # as the mount would show `outside`
    monkeypatch.setattr(removal, "mount_points", lambda: {str(envs)})
    clean(project)
    assert (envs / "env" / "python").read_text() == "precious"
    assert sorted(p.name for p in (project / ".kbuild").iterdir()) == ["envs"]
    assert not (project / "build").exists()
    assert warnings == [f"{envs} is a mount point (another file system, or a folder mounted from "
                        "elsewhere): not removed, nor what holds it; unmount it and run `kbuild "
                        "clean` again"]


def test_clean_leaves_a_real_bind_mount_alone(tmp_path, monkeypatch):
    """The same with a real bind mount, where this user may mount (root in a container)."""
    import subprocess
    project, envs, outside = project_with_mount(tmp_path)
    if subprocess.run(["mount", "--bind", str(outside), str(envs)], capture_output=True).returncode:
        pytest.skip("this user cannot bind-mount (the test above covers the rule)")
    try:
        warnings: list[str] = []
        monkeypatch.setattr("kbuild.cli.build.warn", warnings.append)
        clean(project)
        assert (outside / "env" / "python").read_text() == "precious"
        assert len(warnings) == 1 and str(envs) in warnings[0]
    finally:
        subprocess.run(["umount", str(envs)], capture_output=True)
