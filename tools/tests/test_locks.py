"""Realising environments from their locks: hash checking with the real uv, and the promise of
the lock: one CPU and one CUDA environment realised in two fresh folders build byte-identical
variants, whose metadata names the locks."""

from __future__ import annotations

import hashlib
import json
import shutil
import tomllib
from pathlib import Path

import pytest

from kbuild_testing import REPO, copy_project, kbuild, one_arch, this_python
from kbuild.core.errors import BuildError
from kbuild.matrix import envs, lockfile, matrix

LOCKS = REPO / "locks" / "linux-64"
ENVS = {"torch213-cpu": "torch213-cxx11-cpu-x86_64-linux",
        "torch214-cu130": "torch214-cxx11-cu130-x86_64-linux"}


def one_package_lock(tmp_path: Path, name: str, version: str, url: str, sha256: str) -> lockfile.Lock:
    """A lock (environment "tiny") of one package: one wheel at `url` with the given hash."""
    path = tmp_path / "locks" / "linux-64" / "pylock.tiny.toml"
    path.parent.mkdir(parents=True)
    path.write_text(f'''lock-version = "1.0"
created-by = "test"

[[packages]]
name = "{name}"
version = "{version}"
wheels = [{{ url = "{url}", hashes = {{ sha256 = "{sha256}" }} }}]

[tool.kbuild]
environment = "tiny"
platform = "linux-64"
python = "{this_python()}"
requirements = ["{name}"]
indexes = []
torch-index = false
inputs = "sha256:{"0" * 64}"
''')
    return lockfile.read(path)


def small_lock(tmp_path: Path, sha256: str) -> lockfile.Lock:
    """A lock of one small package taken from a committed lock, with the given hash."""
    source = tomllib.loads((LOCKS / "pylock.torch213-cpu.toml").read_text())
    pkg = next(p for p in source["packages"] if p["name"] == "idna")
    return one_package_lock(tmp_path, "idna", pkg["version"], pkg["wheels"][0]["url"], sha256)


def test_install_from_lock_checks_hashes(tmp_path):
    inst = envs.installer()
    source = tomllib.loads((LOCKS / "pylock.torch213-cpu.toml").read_text())
    good = next(p for p in source["packages"] if p["name"] == "idna")["wheels"][0]["hashes"]["sha256"]
    venv, log = tmp_path / "venv", tmp_path / "install.log"
    inst.create(venv, log)
    with pytest.raises(BuildError):
        inst.install_locked(venv, small_lock(tmp_path / "bad", "0" * 64), log)
    assert "hash" in log.read_text().lower()
    assert not list(venv.glob("lib/python*/site-packages/idna"))
    inst.install_locked(venv, small_lock(tmp_path / "good", good), log)
    assert list(venv.glob("lib/python*/site-packages/idna"))


def toy_wheel(folder: Path, version: str) -> Path:
    """A minimal pure-Python wheel of `kb-toy` that records its version."""
    import zipfile
    path = folder / f"kb_toy-{version}-py3-none-any.whl"
    info = f"kb_toy-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr("kb_toy/__init__.py", f"VERSION = {version!r}\n")
        whl.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: kb-toy\nVersion: {version}\n")
        whl.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                      "Tag: py3-none-any\n")
        whl.writestr(f"{info}/RECORD", "")
    return path


def test_a_local_version_beside_the_pinned_one_is_not_taken(tmp_path):
    """A find-links folder holding `1.0+cpu` beside the locked `1.0` (as one holding torch
    2.13.0+cpu beside PyPI's 2.13.0): `==1.0` would match both and pick the local one."""
    import dataclasses
    links = tmp_path / "links"
    links.mkdir()
    pinned = toy_wheel(links, "1.0")
    toy_wheel(links, "1.0+cpu")
    locked = one_package_lock(tmp_path, "kb-toy", "1.0",
                              "https://files.pythonhosted.org/kb_toy-1.0-py3-none-any.whl",
                              hashlib.sha256(pinned.read_bytes()).hexdigest())
    base = envs.installer()
    inst = dataclasses.replace(base, config={**base.config,
                                             "find-links": [*base.config.get("find-links", []), str(links)]})
    venv, log = tmp_path / "venv", tmp_path / "install.log"
    inst.create(venv, log)
    inst.install_locked(venv, locked, log)
    (init,) = venv.glob("lib/python*/site-packages/kb_toy/__init__.py")
    assert init.read_text() == "VERSION = '1.0'\n"


def variant_files(build: Path) -> dict[str, bytes]:
    return {p.relative_to(build).as_posix(): p.read_bytes() for p in build.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


@pytest.mark.slow
def test_rebuild_from_the_lock_is_byte_identical(work):
    """`kbuild build --env` for each environment, realised from its lock twice in a fresh folder
    (projects without a pixi.toml: the default matrix and its shipped locks); the variants are
    the same bytes and name the locks they came from. Both realisations are at one path, so the
    second build's compiles are compiler-cache hits exactly when the environments hold the same
    compilers and headers (real compiles of two checkouts: test_cuda_variant's reproducibility)."""
    builds = []
    project, folder = copy_project(work / "img2gray"), work / "envs"
    one_arch(project)
    for _realisation in range(2):
        for generated in (folder, project / "build", project / ".kbuild"):
            shutil.rmtree(generated, ignore_errors=True)
        for name in ENVS:
            proc = kbuild("build", project, "--env", name, env={"KBUILD_ENVS_DIR": str(folder)})
            assert proc.returncode == 0, proc.stdout + proc.stderr
            assert "default matrix" in proc.stderr
            assert (envs.read_stamp(folder / name) or {}).get("lock"), "not realised from its lock"
        builds.append(variant_files(project / "build"))
    assert sorted({p.split("/")[0] for p in builds[0]}) == sorted(ENVS.values())
    assert builds[0] == builds[1]
    shipped = matrix.DEFAULT_MATRIX.parent / "locks" / "linux-64"
    sha = lambda p: "sha256:" + hashlib.sha256(p.read_bytes()).hexdigest()  # noqa: E731
    for name, variant in ENVS.items():
        meta = json.loads(builds[0][f"{variant}/metadata.json"])
        expected = {"name": name, "lock": sha(shipped / f"pylock.{name}.toml")}
        if "cu" in name:
            expected["toolkit-lock"] = sha(shipped / "pylock.toolkit-cu130.toml")
        assert meta["provenance"]["environment"] == expected
