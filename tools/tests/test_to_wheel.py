"""`kbuild to-wheel`: one wheel per variant, installable by pip, from a build folder or the Hub."""

from __future__ import annotations

import base64
import csv
import fcntl
import hashlib
import io
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from kbuild_testing import REPO as REPO_ROOT
from kbuild.core.built import BuiltVariant, digest_files
from kbuild.publish import wheel as publish
from kbuild.core.errors import BuildError
from kbuild.publish.wheel import build_wheel, wheel_tags
from kbuild_testing import as_variant, fresh_copy
from test_publish import REPO, client_env, do_upload, hub, kbuild_cli, variant_of  # noqa: F401

TORCH = torch.__version__.split("+")[0]
TORCH_MM = "".join(TORCH.split(".")[:2])
WHEEL_ENV = REPO_ROOT / ".kbuild" / "test-envs" / f"wheel-torch{TORCH_MM}"


@pytest.fixture
def proj(builds, tmp_path) -> Path:
    return fresh_copy(builds(), tmp_path / "img2gray")


def wheel_env() -> Path:
    """Python of a plain venv with only torch (cached under .kbuild/test-envs; ~30 s to make)."""
    python = WHEEL_ENV / "bin" / "python"
    stamp = WHEEL_ENV / ".complete"
    WHEEL_ENV.parent.mkdir(parents=True, exist_ok=True)
    with open(WHEEL_ENV.with_name(WHEEL_ENV.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (stamp.is_file() and stamp.read_text() == TORCH and python.exists()):
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(WHEEL_ENV)], check=True)
            subprocess.run([str(python), "-m", "pip", "install", "-q", f"torch=={TORCH}"], check=True,
                           capture_output=True)
            stamp.write_text(TORCH)
    return python


def pip(python: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "-m", "pip", *args], capture_output=True, text=True, timeout=300)


def read_wheel(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


def test_tags_of_variant_names():
    cases = {
        "torch213-cxx11-cpu-x86_64-linux": ("torch213cpu", "cp39-abi3-manylinux_2_28_x86_64", "torch==2.13.*"),
        "torch27-cxx11-cu126-aarch64-linux": ("torch27cu126", "cp39-abi3-manylinux_2_28_aarch64", "torch==2.7.*"),
        "torch-stable-abi29-cu130-x86_64-linux": ("stableabi29cu130", "cp39-abi3-manylinux_2_28_x86_64", "torch>=2.9"),
        "torch213-metal-aarch64-darwin": ("torch213metal", "cp39-abi3-macosx_11_0_arm64", "torch==2.13.*"),
        "torch-cuda": ("cuda", "py3-none-any", "torch"),
        "torch-universal": ("universal", "py3-none-any", "torch"),
    }
    for variant, (local, tag, requirement) in cases.items():
        tags = wheel_tags(variant)
        assert (tags.local, tags.tag, tags.torch_requirement) == (local, tag, requirement), variant
    with pytest.raises(BuildError, match="not a torch variant name"):
        wheel_tags("tvm-ffi01-cpu-x86_64-linux")


def test_compiled_wheel_layout_metadata_and_record(proj, tmp_path):
    variant = variant_of(proj)
    wheel = build_wheel(BuiltVariant.load(variant), tmp_path / "dist")
    assert wheel.name == f"img2gray-1.0.0+torch{TORCH_MM}cpu-cp39-abi3-manylinux_2_28_x86_64.whl"
    files = read_wheel(wheel)
    dist_info = f"img2gray-1.0.0+torch{TORCH_MM}cpu.dist-info"
    shipped = {p.name for p in variant.iterdir()}
    assert {n.split("/", 1)[1] for n in files if n.startswith("img2gray/")} == shipped
    assert set(files) == ({f"img2gray/{n}" for n in shipped}
                          | {f"{dist_info}/{n}" for n in ("METADATA", "WHEEL", "RECORD")})
    for name in shipped:
        assert files[f"img2gray/{name}"] == (variant / name).read_bytes()

    metadata = files[f"{dist_info}/METADATA"].decode().splitlines()
    assert "Name: img2gray" in metadata and f"Version: 1.0.0+torch{TORCH_MM}cpu" in metadata
    assert f"Requires-Dist: torch=={TORCH_MM[0]}.{TORCH_MM[1:]}.*" in metadata
    assert "Requires-Python: >=3.9" in metadata and "License: apache-2.0" in metadata
    wheel_meta = files[f"{dist_info}/WHEEL"].decode()
    assert "Root-Is-Purelib: false" in wheel_meta and "Tag: cp39-abi3-manylinux_2_28_x86_64" in wheel_meta

    rows = list(csv.reader(io.StringIO(files[f"{dist_info}/RECORD"].decode())))
    assert {r[0] for r in rows} == set(files)
    for path, digest, size in rows:
        if path.endswith("RECORD"):
            assert digest == size == ""
            continue
        expected = base64.urlsafe_b64encode(hashlib.sha256(files[path]).digest()).rstrip(b"=").decode()
        assert (digest, int(size)) == (f"sha256={expected}", len(files[path]))

    # Reproducible: the same variant gives the same bytes.
    assert build_wheel(BuiltVariant.load(variant), tmp_path / "again").read_bytes() == wheel.read_bytes()


def test_noarch_variant_is_a_pure_wheel(tmp_path):
    variant = tmp_path / "build" / "torch-cpu"
    variant.mkdir(parents=True)
    (variant / "__init__.py").write_text("from ._ops import ops\n\n\ndef hello():\n    return 'hi'\n")
    (variant / "_ops.py").write_text("ops = None\n")
    (variant / "metadata.json").write_text(json.dumps({
        "name": "tiny-kernel", "id": "_tiny_kernel_cpu_abc1234", "version": 3, "license": "mit",
        "python-depends": ["einops"], "kernel-depends": [], "backend": {"type": "cpu"},
        "digest": {"algorithm": "sha256", "files": digest_files(variant)}}))
    (wheel,) = publish.to_wheels(tmp_path / "build", out=tmp_path / "dist", log=lambda _: None)
    assert wheel.name == "tiny_kernel-3.0.0+cpu-py3-none-any.whl"
    files = read_wheel(wheel)
    metadata = files["tiny_kernel-3.0.0+cpu.dist-info/METADATA"].decode().splitlines()
    assert "Name: tiny-kernel" in metadata and "Requires-Dist: torch" in metadata
    assert "Requires-Dist: einops" in metadata
    assert "Root-Is-Purelib: true" in files["tiny_kernel-3.0.0+cpu.dist-info/WHEEL"].decode()
    assert "tiny_kernel/__init__.py" in files


def test_tampered_variant_is_refused(proj, tmp_path):
    variant = variant_of(proj)
    tampered = variant.with_name("torch299-cxx11-cpu-x86_64-linux")
    shutil.copytree(variant, tampered)
    (tampered / "_ops.py").write_text("# edited\n")
    with pytest.raises(BuildError, match="_ops.py has changed since the build"):
        build_wheel(BuiltVariant.load(tampered), tmp_path / "dist")
    warnings: list[str] = []
    (wheel,) = publish.to_wheels(proj, out=tmp_path / "dist", log=lambda _: None, warn=warnings.append)
    assert "torch299" not in wheel.name and warnings[0].startswith(f"skipping {tampered.name}: ")
    shutil.rmtree(variant)
    with pytest.raises(BuildError, match="_ops.py has changed since the build"):
        publish.to_wheels(proj, out=tmp_path / "dist", log=lambda _: None, warn=warnings.append)


def _rewrite_meta(variant: Path, **changes) -> None:
    path = variant / "metadata.json"
    meta = json.loads(path.read_text())
    meta.update(changes)
    meta = {k: v for k, v in meta.items() if v is not None}
    path.write_text(json.dumps(meta))


def test_variant_without_a_valid_digest_is_refused(proj, tmp_path):
    variant = variant_of(proj)
    digest = json.loads((variant / "metadata.json").read_text())["digest"]
    (variant / "_ops.py").write_text("# tampered\n")
    for wrong in (None, {"algorithm": "sha256", "files": []}, "x"):
        _rewrite_meta(variant, digest=wrong)
        with pytest.raises(BuildError) as err:
            build_wheel(BuiltVariant.load(variant), tmp_path / "dist")
        assert "digest" in str(err.value)
    _rewrite_meta(variant, digest=digest, provenance="x")
    with pytest.raises(BuildError, match="`provenance` must be an object"):
        build_wheel(BuiltVariant.load(variant), tmp_path / "dist")
    assert not (tmp_path / "dist").exists() or not list((tmp_path / "dist").iterdir())


def test_record_is_csv_even_for_odd_file_names(proj, tmp_path):
    variant = variant_of(proj)
    odd = ["data/a,b.txt", 'data/quote"d.txt', "data/new\nline.txt"]
    for name in odd:
        (variant / name).parent.mkdir(exist_ok=True)
        (variant / name).write_text(name)
    _rewrite_meta(variant, digest={"algorithm": "sha256", "files": digest_files(variant)})
    files = read_wheel(build_wheel(BuiltVariant.load(variant), tmp_path / "dist"))
    (record,) = [n for n in files if n.endswith(".dist-info/RECORD")]
    rows = list(csv.reader(io.StringIO(files[record].decode(), newline="")))
    assert sorted(r[0] for r in rows) == sorted(files)
    assert {f"img2gray/{n}" for n in odd} <= {r[0] for r in rows}


@pytest.mark.parametrize("changes", [
    {"upstream": "https://example.invalid\nRequires-Dist: evil"},
    {"license": "mit\rRequires-Dist: evil"},
    {"python-depends": ["evil @ https://example.invalid/evil.whl"]},
])
def test_metadata_cannot_add_wheel_headers(proj, tmp_path, changes):
    variant = variant_of(proj)
    _rewrite_meta(variant, **changes)
    with pytest.raises(BuildError):
        build_wheel(BuiltVariant.load(variant), tmp_path / "dist")
    assert not (tmp_path / "dist").exists() or not list((tmp_path / "dist").iterdir())


def test_pip_installs_the_right_wheel_into_a_fresh_venv_and_the_op_runs(proj, tmp_path):
    python = wheel_env()
    variant = variant_of(proj)
    # A decoy for another torch in the same folder: pip must pick the wheel for the torch it has.
    as_variant(variant, variant.name.replace(f"torch{TORCH_MM}", "torch299"))
    dist = tmp_path / "dist"
    result = subprocess.run([sys.executable, "-m", "kbuild", "to-wheel", proj, "--out", dist],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in dist.iterdir()) == sorted([
        f"img2gray-1.0.0+torch{TORCH_MM}cpu-cp39-abi3-manylinux_2_28_x86_64.whl",
        "img2gray-1.0.0+torch299cpu-cp39-abi3-manylinux_2_28_x86_64.whl"])

    pip(python, "uninstall", "-y", "img2gray")  # a leftover of an interrupted run
    installed = pip(python, "install", "--no-index", "--find-links", str(dist), "img2gray")
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert f"Successfully installed img2gray-1.0.0+torch{TORCH_MM}cpu" in installed.stdout
    try:
        kernel_id = json.loads((variant / "metadata.json").read_text())["id"]
        run = subprocess.run([str(python), "-c", f"""
import torch, img2gray
assert "site-packages" in img2gray.__file__, img2gray.__file__
x = torch.randint(0, 256, (5, 6, 3), dtype=torch.uint8)
ref = (x.float()[..., 0] * 0.21 + x.float()[..., 1] * 0.72 + x.float()[..., 2] * 0.07).to(torch.uint8)
assert torch.equal(img2gray.img2gray(x), ref)
assert torch.ops.{kernel_id}.img2gray.default is not None
assert img2gray.ops is torch.ops.{kernel_id}
print("OK", img2gray.{kernel_id}.__name__)
"""], capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert run.returncode == 0, run.stderr
        assert f"OK img2gray.{kernel_id}" in run.stdout
        shown = pip(python, "show", "-f", "img2gray").stdout
        assert "Requires: torch" in shown and f"img2gray/{kernel_id}.abi3.so" in shown
    finally:
        removed = pip(python, "uninstall", "-y", "img2gray")
    assert removed.returncode == 0, removed.stderr
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['platlib'])"],
                               capture_output=True, text=True).stdout.strip())
    assert not (site / "img2gray").exists()


def test_to_wheel_from_the_hub(hub, proj, tmp_path):  # noqa: F811
    do_upload(hub, proj)
    env = client_env(hub, tmp_path)
    result = kbuild_cli("to-wheel", "--repo-id", REPO, "--version", "1", "--out", tmp_path / "hub", env=env)
    assert result.returncode == 0, result.stderr
    (from_hub,) = (tmp_path / "hub").iterdir()
    local = build_wheel(BuiltVariant.load(variant_of(proj)), tmp_path / "local")
    assert from_hub.name == local.name and from_hub.read_bytes() == local.read_bytes()

    missing = kbuild_cli("to-wheel", "--repo-id", REPO, "--version", "7", "--out", tmp_path / "x", env=env)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert "kernels-test/img2gray has no version 7 (branch v7)" in missing.stderr
    norepo = kbuild_cli("to-wheel", "--repo-id", "kernels-test/nope", "--version", "1", "--out", tmp_path / "x",
                        env=env)
    assert norepo.returncode == 2 and "not found (HTTP 404)" in norepo.stderr
    needs_version = kbuild_cli("to-wheel", "--repo-id", REPO, env=env)
    assert needs_version.returncode == 2 and "--repo-id needs --version" in needs_version.stderr
