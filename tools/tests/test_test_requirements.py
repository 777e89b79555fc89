"""What a project's tests need and the target interpreter lacks is installed beside its
environment, never into it (kernels-community's einops failed under `kbuild test --env` with
`No module named 'numpy'`: PyPI's torch does not bring numpy, nixpkgs' does).

Offline and without a large environment: the target is a virtual environment that sees the
builder's own packages but numpy (a folder of links to them), and pip is pointed at a local
folder of wheels alone: numpy's (and pytest's, for a matrix environment) is made from the one
installed here (its own files), the project's check inputs are two small wheels made here."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from kbuild.stages import pipeline
from kbuild_testing import make_project

pytestmark = pytest.mark.slow

TESTS = '''import numpy
import testdep_extra
import testdep_marker

import demo


def test_the_requirements_are_there():
    assert numpy.arange(3).sum() == 3
    assert testdep_marker.VALUE == 1 and testdep_extra.VALUE == 2
    assert demo.MARK == "built"
'''


def wheel(folder: Path, name: str, version: str, files: dict[str, bytes], tag: str,
          meta: str | None = None) -> Path:
    """A wheel of `files` (archive path → bytes) with its dist-info (`meta`: METADATA's text)
    and RECORD."""
    dist = f"{name.replace('-', '_')}-{version}.dist-info"
    files = {**files, f"{dist}/METADATA": (meta or f"Metadata-Version: 2.1\nName: {name}\n"
                                                   f"Version: {version}\n").encode(),
             f"{dist}/WHEEL": f"Wheel-Version: 1.0\nGenerator: kbuild-tests\nRoot-Is-Purelib: "
                              f"{'true' if tag.startswith('py3') else 'false'}\nTag: {tag}\n".encode()}
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for arc, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        writer.writerow((arc, f"sha256={digest}", len(data)))
    writer.writerow((f"{dist}/RECORD", "", ""))
    path = folder / f"{name.replace('-', '_')}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for arc, data in {**files, f"{dist}/RECORD": record.getvalue().encode()}.items():
            zf.writestr(arc, data)
    return path


def wheel_of_installed(folder: Path, name: str) -> Path:
    """The installed distribution `name` as a wheel of its own files (its RECORD's) and
    metadata (its dependencies included)."""
    dist = metadata.distribution(name)
    tag = next(line.split(": ", 1)[1] for line in dist.read_text("WHEEL").splitlines()
               if line.startswith("Tag: "))
    files = {str(f): Path(dist.locate_file(f)).read_bytes() for f in dist.files
             if ".dist-info/" not in str(f) and "__pycache__" not in str(f)
             and not str(f).startswith("..")}
    return wheel(folder, dist.metadata["Name"], dist.version, files, tag,
                 dist.read_text("METADATA"))


@pytest.fixture(scope="module")
def without_numpy(tmp_path_factory) -> Path:
    """An interpreter whose environment holds torch, kernels and pytest (the builder's own) and
    no numpy."""
    import sysconfig
    root = tmp_path_factory.mktemp("target")
    site = Path(sysconfig.get_paths()["purelib"])
    links = root / "site"
    links.mkdir()
    for entry in site.iterdir():
        if not entry.name.startswith("numpy") and entry.suffix != ".pth":
            (links / entry.name).symlink_to(entry)
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(root / "venv")], check=True)
    python = root / "venv" / "bin" / "python"
    target_site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig."
                                       "get_paths()['purelib'])"], capture_output=True, text=True,
                                      check=True).stdout.strip())
    (target_site / "builder-packages.pth").write_text(f"{links}\n")
    probe = subprocess.run([str(python), "-c", "import torch, kernels, pytest; import numpy"],
                           capture_output=True, text=True)
    assert "No module named 'numpy'" in probe.stderr, probe.stderr
    return python


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("wheels")
    for name in ("numpy", "pytest", "pluggy", "iniconfig", "pygments", "packaging"):
        wheel_of_installed(folder, name)  # pytest and its own, for an environment without it
    for name, version, value in (("testdep-marker", "1.0", 1), ("testdep-marker", "2.0", 1),
                                 ("testdep-extra", "1.5", 2)):
        wheel(folder, name, version, {f"{name.replace('-', '_')}/__init__.py":
                                      f"VALUE = {value}\n".encode()}, "py3-none-any")
    return folder


def offline(tmp_path: Path, wheels: Path) -> dict[str, str]:
    """pip with no configuration file and no index: the folder of wheels alone."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "HF_", "UV_"))}
    env.pop("LOCAL_KERNELS", None)
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1",
            "PIP_FIND_LINKS": str(wheels), "KBUILD_ENVS_DIR": str(tmp_path / "envs"),
            "HF_HUB_OFFLINE": "1"}


def built_project(tmp_path: Path, backends: str, check_inputs: str,
                  requirements: str | None = None) -> Path:
    """A noarch project whose tests import numpy and the two small packages: `check_inputs` is
    flake.nix's pythonCheckInputs, `requirements` tests/requirements.txt."""
    project = make_project(tmp_path / "demo", "[torch-noarch]\n", backends=backends)
    (project / "torch-ext" / "demo" / "__init__.py").write_text('MARK = "built"\n')
    (project / "flake.nix").write_text(
        "{ outputs = { self, kernel-builder }: kernel-builder.lib.genKernelFlakeOutputs {\n"
        f"    inherit self; path = ./.;\n    pythonCheckInputs = {check_inputs};\n  }}; }}\n")
    (project / "tests").mkdir()
    if requirements is not None:
        (project / "tests" / "requirements.txt").write_text(requirements)
    (project / "tests" / "test_needs.py").write_text(TESTS)
    pipeline.build(project)
    return project


def kbuild_test(project: Path, python: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kbuild", "test", "--python", str(python)],
                          cwd=project, env=env, capture_output=True, text=True, timeout=600)


def test_the_tests_get_numpy_and_their_declared_packages_beside_the_environment(
        tmp_path, without_numpy, wheels):
    project = built_project(tmp_path, '["cpu"]', "ps: with ps; [ testdep-marker ]",
                            requirements="testdep-extra>=1.0\n")
    env = offline(tmp_path, wheels)

    proc = kbuild_test(project, without_numpy, env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "tests: installing numpy, testdep-marker, testdep-extra>=1.0 for the tests, beside " \
           "the environment (not in it)" in proc.stderr
    assert "1 passed" in proc.stdout
    # The environment itself is as it was; the same run again installs nothing.
    probe = subprocess.run([str(without_numpy), "-c", "import numpy"], capture_output=True, text=True)
    assert probe.returncode == 1 and "No module named 'numpy'" in probe.stderr
    again = kbuild_test(project, without_numpy, env)
    assert again.returncode == 0 and "installing" not in again.stderr, again.stderr

    # A requirement the environment holds at another version is refused, never replaced.
    subprocess.run([sys.executable, "-m", "pip", "--python", str(without_numpy), "install", "-q",
                    "testdep-marker==1.0"], env=env, check=True)
    (project / "tests" / "requirements.txt").write_text("testdep-extra>=1.0\ntestdep-marker>=2\n")
    clash = kbuild_test(project, without_numpy, env)
    lines = clash.stderr.strip().splitlines()
    assert clash.returncode == 2 and lines[-2].startswith("error: the tests' requirements") and \
        "need testdep-marker 2.0, and the environment of" in lines[-2] and \
        "holds testdep-marker 1.0" in lines[-2], clash.stderr


def test_a_matrix_environment_gets_numpy_beside_it(tmp_path, cuda_python, wheels):
    """The issue's path: `kbuild test --env torch214-cu130` (a locked environment: torch with
    CUDA, kernels, no numpy) of a noarch project whose tests import numpy and a flake's check
    input. The environment is realised by the fixture; the test run itself is offline."""
    from kbuild_testing import CUDA_ENV, envs_folder
    project = built_project(tmp_path, '["cpu", "cuda"]',
                            "pkgs: with pkgs; [ testdep-marker testdep-extra ]")
    lacks = subprocess.run([cuda_python, "-c", "import numpy"], capture_output=True, text=True)
    assert "No module named 'numpy'" in lacks.stderr

    env = {**offline(tmp_path, wheels), "KBUILD_ENVS_DIR": str(envs_folder())}
    proc = subprocess.run([sys.executable, "-m", "kbuild", "test", "--env", CUDA_ENV], cwd=project,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "tests load build/torch-cuda (" in proc.stderr and "1 passed" in proc.stdout
    again = subprocess.run([cuda_python, "-c", "import numpy"], capture_output=True, text=True)
    assert again.returncode == 1  # the locked environment is as it was
