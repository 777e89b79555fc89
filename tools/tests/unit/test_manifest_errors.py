"""Bad build.toml input, in process: each case ends in one BuildError that names the file, the key
and what to do, before anything is written (the manifest and plan stages of `kbuild build`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kbuild.stages.plan import plan_variant
from kbuild.core import manifest
from kbuild.core.errors import BuildError
from kbuild_testing import edit, fake_torch, symlink_out


def manifest_link_out(project: Path) -> None:
    outside = project.parent / "elsewhere.toml"
    os.replace(project / "build.toml", outside)
    os.symlink(outside, project / "build.toml")


def torch_ext_link_out(project: Path) -> None:
    outside = project.parent / "secret.txt"
    outside.write_text("secret\n")
    os.symlink(outside, project / "torch-ext" / "img2gray" / "data.txt")


def noarch_with_kernels(project: Path) -> None:
    text = (project / "build.toml").read_text()
    torch = text[text.index("[torch]"):text.index("[kernel.")]
    (project / "build.toml").write_text(text.replace(torch, "[torch-noarch]\n\n"))


def no_module(project: Path) -> None:
    (project / "torch-ext" / "img2gray" / "__init__.py").unlink()


INJECTION = '")\nexecute_process(COMMAND touch /tmp/kb-pwned)\nset(X "'

# (id, mutation, key the error names (None: the file only), words the message must contain)
CASES = [
    # The cases of the CLI suite (tools/tests/test_bad_input.py), in process.
    ("malformed-toml", edit('name = "img2gray"', 'name = "img2gray'), None, ["malformed TOML"]),
    ("unknown-general-key", edit("version = 1", "version = 1\ncolour = 3"), "general.colour", ["unknown key"]),
    ("unknown-kernel-key", edit('backend = "cpu"', 'backend = "cpu"\nsrcs = []'), "kernel.img2gray_cpu.srcs", ["unknown key", "`src`"]),
    ("bad-name", edit('name = "img2gray"', 'name = "Img2Gray"'), "general.name", ["must match"]),
    ("missing-name", edit('name = "img2gray"\n', ""), "general.name", ["missing"]),
    ("negative-version", edit("version = 1", "version = -1"), "general.version", []),
    ("missing-source", edit('src = ["csrc/img2gray_cpu.cpp"', 'src = ["csrc/nope.cpp"'), "kernel.img2gray_cpu.src", ["nope.cpp", "does not exist"]),
    ("duplicated-source", edit('src = ["csrc/img2gray_cpu.cpp"', 'src = ["csrc/img2gray_cpu.cpp", "csrc/img2gray_cpu.cpp"'), "kernel.img2gray_cpu.src", ["listed twice"]),
    ("parent-escape", edit('src = ["csrc/img2gray_cpu.cpp"', 'src = ["../img2gray_cpu.cpp"'), "kernel.img2gray_cpu.src", ["outside the project"]),
    ("absolute-path", edit('src = ["csrc/img2gray_cpu.cpp"', 'src = ["/etc/hostname"'), "kernel.img2gray_cpu.src", ["absolute path"]),
    ("symlink-out", symlink_out, "kernel.img2gray_cpu.src", ["outside the project"]),
    ("unknown-backend", edit('backends = ["cpu", "cuda"]', 'backends = ["cpu", "cuda", "tpu9"]'), "general.backends[2]", []),
    ("kernel-backend-not-listed", edit('backends = ["cpu", "cuda"]', 'backends = ["cpu"]'), "kernel.img2gray_cuda.backend", ["not in general.backends"]),
    ("bad-capability", edit('backend = "cuda"', 'backend = "cuda"\ncuda-capabilities = ["sm90"]'), "kernel.img2gray_cuda.cuda-capabilities[0]", ["invalid CUDA capabilities"]),
    ("unknown-depends", edit("depends = []", 'depends = ["boost"]'), "kernel.img2gray_cuda.depends[0]", ["unknown dependencies"]),
    ("two-frameworks", edit("[torch]", "[torch-noarch]\n\n[torch]"), "torch-noarch", ["exactly one of"]),
    ("edition-too-new", edit("edition = 5", "edition = 9"), "general.edition", ["newer"]),
    ("python-depends-not-allowed", edit("version = 1", 'version = 1\npython-depends = ["requests"]'), "general.python-depends", ["not an allowed"]),
    ("torch-minver", edit('include = ["csrc"]', 'include = ["csrc"]\nminver = "9.0"'), "torch.minver", ["older than minver"]),
    ("missing-module", no_module, "general.name", ["__init__.py"]),
    ("not-utf8", lambda p: (p / "build.toml").write_bytes(b"\xff\xfe[general]"), None, ["UTF-8"]),
    ("no-manifest", lambda p: (p / "build.toml").unlink(), None, ["no build.toml"]),
    ("missing-include-dir", edit('include = ["csrc"]', 'include = ["headers"]'), "torch.include", ["headers", "does not exist"]),
    # Issue 11 (types and forms) and issue 12 (unknown keys).
    ("edition-table", edit("edition = 5", "edition = {}"), "general.edition", ["integer"]),
    ("edition-negative", edit("edition = 5", "edition = -1"), "general.edition", ["no edition -1"]),
    ("edition-bool", edit("edition = 5", "edition = true"), "general.edition", ["integer"]),
    ("version-bool", edit("version = 1", "version = true"), "general.version", ["integer"]),
    ("version-float", edit("version = 1", "version = 1.5"), "general.version", ["integer"]),
    ("version-string", edit("version = 1", 'version = "1"'), "general.version", ["integer"]),
    ("torch-minver-empty", edit('include = ["csrc"]', 'include = ["csrc"]\nminver = ""'), "torch.minver", ["not a version"]),
    ("torch-minver-abc", edit('include = ["csrc"]', 'include = ["csrc"]\nminver = "abc"'), "torch.minver", ["not a version"]),
    ("torch-maxver-3-parts", edit('include = ["csrc"]', 'include = ["csrc"]\nmaxver = "2.9.1"'), "torch.maxver", ["more than 2 parts"]),
    ("torch-minver-number", edit('include = ["csrc"]', 'include = ["csrc"]\nminver = 2.9'), "torch.minver", ["string"]),
    ("repo-id-dotdot", edit('repo-id = "kernels-test/img2gray"', 'repo-id = "../.."'), "general.hub.repo-id", ["not a Hub repo id"]),
    ("repo-id-no-org", edit('repo-id = "kernels-test/img2gray"', 'repo-id = "img2gray"'), "general.hub.repo-id", ["org/name"]),
    ("branch-bad", edit('repo-id = "kernels-test/img2gray"', 'repo-id = "kernels-test/img2gray"\nbranch = "a..b"'), "general.hub.branch", ["not a valid branch"]),
    ("name-empty", edit('name = "img2gray"', 'name = ""'), "general.name", ["must match"]),
    ("name-injection", edit('name = "img2gray"', 'name = "img2gray\\")\\nexecute_process(COMMAND id)"'), "general.name", ["must match"]),
    ("kernel-name-injection", edit("[kernel.img2gray_cpu]", "[kernel." + __import__("json").dumps(INJECTION) + "]"), None, ["kernel section name"]),
    ("kernel-name-empty", edit("[kernel.img2gray_cpu]", '[kernel.""]'), 'kernel.""', ["kernel section name"]),
    ("kernel-name-dollar", edit("[kernel.img2gray_cpu]", '[kernel."${HOME}"]'), 'kernel."${HOME}"', ["kernel section name"]),
    ("src-not-list", edit('src = ["csrc/img2gray_cpu.cpp", "csrc/img2gray.h"]', 'src = "csrc/img2gray_cpu.cpp"'), "kernel.img2gray_cpu.src", ["list"]),
    ("src-item-int", edit('src = ["csrc/img2gray_cpu.cpp", "csrc/img2gray.h"]', 'src = ["csrc/img2gray_cpu.cpp", 3]'), "kernel.img2gray_cpu.src[1]", ["string"]),
    ("flag-newline", edit('backend = "cpu"', 'backend = "cpu"\ncxx-flags = ["-O2\\n-DX"]'), "kernel.img2gray_cpu.cxx-flags[0]", ["control characters"]),
    ("path-nul", edit('src = ["csrc/img2gray_cpu.cpp"', 'src = ["csrc/img2gray_cpu.cpp\\u0000"'), "kernel.img2gray_cpu.src[0]", ["control characters"]),
    ("license-newline", edit('license = "apache-2.0"', 'license = "mit\\nextra: 1"'), "general.license", ["license identifier"]),
    ("general-not-table", lambda p: (p / "build.toml").write_text('general = "x"\n[torch]\nsrc = ["a"]\n'), "general", ["dictionary"]),
    ("backend-key-on-wrong-backend", edit('backend = "cpu"', 'backend = "cpu"\ncuda-flags = ["-O3"]'), "kernel.img2gray_cpu.cuda-flags", ["cuda kernels"]),
    ("snake-case-key", edit('backend = "cuda"', 'backend = "cuda"\ncuda_flags = ["-O3"]'), "kernel.img2gray_cuda.cuda_flags", ["unknown key", "`cuda-flags`"]),
    ("kernel-backend-neuron", edit('backend = "cpu"', 'backend = "neuron"'), "kernel.img2gray_cpu.backend", []),
    ("noarch-with-kernels", noarch_with_kernels, "kernel.img2gray_cuda", ["compiles nothing"]),
    ("manifest-link-out", manifest_link_out, None, ["outside the project"]),
    ("torch-ext-link-out", torch_ext_link_out, None, ["torch-ext/img2gray/data.txt", "outside the project"]),
    ("cuda-minver-per-kernel-bad", edit('backend = "cuda"', 'backend = "cuda"\ncuda-minver = "twelve"'), "kernel.img2gray_cuda.cuda-minver", ["not a version"]),
    ("kernel-dependency-both", edit("version = 1", 'version = 1\nkernel-depends = [{ repo-id = "org/dep", version = 1, revision = "main" }]'), "general.kernel-depends[0]", ["exactly one"]),
    ("upstream-not-url", edit("version = 1", 'version = 1\nupstream = "file:///etc"'), "general.upstream", ["not a git URL"]),
    ("stable-abi-backend", edit('include = ["csrc"]', 'include = ["csrc"]\nstable-abi = { gpu = "2.9" }'), "torch.stable-abi.gpu", ["unknown backend"]),
]


def snapshot(build: Path) -> dict[str, bytes]:
    return {p.relative_to(build).as_posix(): p.read_bytes() for p in build.rglob("*") if p.is_file()}


def load_and_plan(project: Path):
    m = manifest.load(project)
    return plan_variant(project, m, fake_torch(), "cpu")


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_manifest(project, case):
    _, mutate, key, words = case
    marker = project / "build" / "torch213-cxx11-cpu-x86_64-linux" / "metadata.json"
    marker.parent.mkdir(parents=True)
    marker.write_text('{"sentinel": true}')
    before = snapshot(project / "build")
    mutate(project)
    with pytest.raises(BuildError) as info:
        load_and_plan(project)
    err = info.value
    assert Path(err.file).name == "build.toml", err
    if key is not None:
        assert err.key == key, str(err)
    for word in words:
        assert word in str(err), f"{word!r} not in {str(err)!r}"
    assert err.hint, str(err)
    assert "edition 5 format" not in str(err)
    assert len(str(err).splitlines()) <= 2, str(err)  # one message, one hint
    assert snapshot(project / "build") == before


def test_kernel_name_injection_names_the_section(project):
    edit("[kernel.img2gray_cpu]", "[kernel." + __import__("json").dumps(INJECTION) + "]")(project)
    with pytest.raises(BuildError) as info:
        manifest.load(project)
    assert info.value.key.startswith('kernel."\\")\\nexecute_process'), info.value.key
    assert "\n" not in info.value.key and "\n" not in info.value.message


def test_unknown_key_hint_lists_the_keys_of_its_table(project):
    edit('backend = "cpu"', 'backend = "cpu"\nsrcs = []')(project)
    with pytest.raises(BuildError) as info:
        manifest.load(project)
    assert "did you mean `src`?" in info.value.message
    assert "cxx-flags" in info.value.hint and "docs/authoring.md" in info.value.hint
