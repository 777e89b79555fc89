"""Bad input exits non-zero with one clear message (file, key, what to do), no traceback,
and leaves build/ exactly as it was."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kbuild_testing import edit, kbuild, symlink_out

from kbuild.stages import pipeline
from kbuild.core.errors import BuildError

GOOD = (Path(__file__).resolve().parents[2] / "build.toml").read_text()


def write(text: str):
    return lambda project: (project / "build.toml").write_text(text)


def no_module(project: Path) -> None:
    (project / "torch-ext" / "img2gray" / "__init__.py").unlink()


# (id, mutation, words the message must contain, extra CLI args, extra env)
CASES = [
    ("malformed-toml", edit('name = "img2gray"', 'name = "img2gray'), ["build.toml", "malformed TOML"]),
    ("unknown-general-key", edit("version = 1", "version = 1\ncolour = 3"), ["general.colour", "unknown key"]),
    ("unknown-kernel-key", edit('backend = "cpu"', 'backend = "cpu"\nsrcs = []'), ["kernel.img2gray_cpu.srcs", "unknown key"]),
    ("bad-name", edit('name = "img2gray"', 'name = "Img2Gray"'), ["general.name", "must match"]),
    ("missing-name", edit('name = "img2gray"\n', ""), ["general.name", "missing"]),
    ("negative-version", edit("version = 1", "version = -1"), ["general.version"]),
    ("missing-source", edit('src = ["csrc/img2gray_cpu.cpp"', 'src = ["csrc/nope.cpp"'), ["kernel.img2gray_cpu.src", "nope.cpp", "does not exist"]),
    ("duplicated-source", edit('src = ["csrc/img2gray_cpu.cpp"', 'src = ["csrc/img2gray_cpu.cpp", "csrc/img2gray_cpu.cpp"'), ["kernel.img2gray_cpu.src", "listed twice"]),
    ("parent-escape", edit('src = ["csrc/img2gray_cpu.cpp"', 'src = ["../img2gray_cpu.cpp"'), ["kernel.img2gray_cpu.src", "outside the project"]),
    ("absolute-path", edit('src = ["csrc/img2gray_cpu.cpp"', 'src = ["/etc/hostname"'), ["kernel.img2gray_cpu.src", "absolute path"]),
    ("symlink-out", symlink_out, ["kernel.img2gray_cpu.src", "outside the project"]),
    ("unknown-backend", edit('backends = ["cpu", "cuda"]', 'backends = ["cpu", "cuda", "tpu9"]'), ["general.backends"]),
    ("kernel-backend-not-listed", edit('backends = ["cpu", "cuda"]', 'backends = ["cpu"]'), ["kernel.img2gray_cuda", "not in general.backends"]),
    ("bad-capability", edit('backend = "cuda"', 'backend = "cuda"\ncuda-capabilities = ["sm90"]'), ["kernel.img2gray_cuda.cuda-capabilities", "invalid CUDA capabilities"]),
    ("unknown-depends", edit("depends = []", 'depends = ["boost"]'), ["kernel.img2gray_cuda.depends", "unknown dependencies"]),
    ("two-frameworks", edit("[torch]", "[torch-noarch]\n\n[torch]"), ["build.toml", "exactly one of"]),
    ("edition-too-new", edit("edition = 5", "edition = 9"), ["general.edition", "newer"]),
    ("python-depends-not-allowed", edit("version = 1", 'version = 1\npython-depends = ["requests"]'), ["general.python-depends", "not an allowed"]),
    ("torch-minver", edit('include = ["csrc"]', 'include = ["csrc"]\nminver = "9.0"'), ["torch.minver", "older than minver"]),
    ("missing-module", no_module, ["general.name", "__init__.py"]),
    ("not-utf8", lambda p: (p / "build.toml").write_bytes(b"\xff\xfe[general]"), ["build.toml", "UTF-8"]),
    ("no-manifest", lambda p: (p / "build.toml").unlink(), ["build.toml", "no build.toml"]),
    ("missing-include-dir", edit('include = ["csrc"]', 'include = ["headers"]'), ["torch.include", "headers", "does not exist"]),
]


def snapshot(build: Path) -> dict[str, bytes]:
    return {p.relative_to(build).as_posix(): p.read_bytes() for p in build.rglob("*") if p.is_file()}


def check_message(message: str, words: list[str]) -> None:
    assert "Traceback" not in message
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"
    assert len(message.strip().splitlines()) <= 6, message  # short


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_manifest(project, case):
    """In process: the manifest and plan stages raise one BuildError naming file and key."""
    _, mutate, words = case
    mutate(project)
    with pytest.raises(BuildError) as info:
        pipeline.plans(project, backends=["cpu"])
    check_message(str(info.value), words)
    assert not (project / "build").exists() and not (project / ".kbuild" / "staging").exists()


CLI_CASES = [c for c in CASES if c[0] in ("malformed-toml", "unknown-kernel-key", "symlink-out")]


@pytest.mark.parametrize("case", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_bad_manifest_cli_contract(project, case):
    """Through the CLI: exit 2, `error:` and a hint on stderr, no traceback, build/ untouched."""
    _, mutate, words = case
    marker = project / "build" / "torch213-cxx11-cpu-x86_64-linux" / "metadata.json"
    marker.parent.mkdir(parents=True)
    marker.write_text('{"sentinel": true}')
    before = snapshot(project / "build")
    mutate(project)
    proc = kbuild("build", project, "--backend", "cpu")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stdout
    check_message(proc.stderr, words)
    assert proc.stderr.startswith("error:") and "hint:" in proc.stderr
    assert snapshot(project / "build") == before


def test_missing_torch(project, tmp_path):
    bare = tmp_path / "bare"
    import venv
    venv.EnvBuilder(with_pip=False).create(bare)
    proc = kbuild("build", project, "--python", bare / "bin" / "python")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "cannot import torch" in proc.stderr and "install torch" in proc.stderr
    assert not (project / "build").exists()


def test_missing_interpreter(project):
    proc = kbuild("build", project, "--python", "/nonexistent/python3")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "not found" in proc.stderr


def test_missing_compiler(project):
    proc = kbuild("build", project, "--backend", "cpu", env={"CXX": "no-such-c++"})
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "CXX='no-such-c++'" in proc.stderr
    assert not (project / "build").exists()


@pytest.mark.skipif(__import__("torch").version.cuda is not None, reason="needs a CPU-only torch")
def test_cuda_backend_with_cpu_torch(project):
    proc = kbuild("build", project, "--backend", "cuda")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "not a CUDA build" in proc.stderr and "--backend cpu" in proc.stderr


def test_compile_error_points_to_log(project):
    src = project / "csrc" / "img2gray_cpu.cpp"
    src.write_text(src.read_text() + "\nthis is not C++;\n")
    proc = kbuild("build", project, "--backend", "cpu")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "compilation failed" in proc.stderr and "build.log" in proc.stderr
    assert re.search(r"img2gray_cpu\.cpp:\d+", proc.stderr)
    assert not (project / "build").exists()


@pytest.mark.slow
def test_empty_capability_intersection(project, cuda_python):
    edit('backend = "cuda"', 'backend = "cuda"\ncuda-capabilities = ["5.0", "6.1"]')(project)
    proc = kbuild("build", project, "--python", cuda_python)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "kernel.img2gray_cuda.cuda-capabilities" in proc.stderr
    assert "none of the capabilities" in proc.stderr
    assert not (project / "build").exists()
