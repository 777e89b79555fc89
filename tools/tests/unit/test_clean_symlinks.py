"""`kbuild clean` never follows a symlink out of the project (build/, .kbuild/, a variant)."""

from __future__ import annotations

from pathlib import Path

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

