"""core/built.py: one model of a built variant. The metadata's required keys are required (a
missing one is a problem naming it, or one BuildError), what ships and what the digest covers
are one list, and what assemble writes reads back equal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kbuild.core.backend import Backend
from kbuild.core.built import BuiltVariant, digest_files, shipped_files
from kbuild.core.errors import BuildError
from kbuild.core.metadata import BackendInfo, Digest, VariantMetadata

REQUIRED = ["name", "id", "version", "license", "python-depends", "kernel-depends", "backend"]


def meta(**changes) -> dict:
    base = {"name": "tiny", "id": "_tiny_cpu_abc1234", "version": 1, "license": "mit",
            "python-depends": [], "kernel-depends": [], "backend": {"type": "cpu"}}
    return {k: v for k, v in {**base, **changes}.items() if v is not None}


def folder(root: Path, metadata: dict | str | None) -> Path:
    variant = root / "torch-cpu"
    (variant / "__pycache__").mkdir(parents=True)
    (variant / "__init__.py").write_text("X = 1\n")
    (variant / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"junk")
    (variant / "data").mkdir()
    (variant / "data" / "t.json").write_text("{}")
    if metadata is not None:
        text = metadata if isinstance(metadata, str) else json.dumps(metadata)
        (variant / "metadata.json").write_text(text)
    return variant


def test_a_complete_metadata_reads_typed(tmp_path):
    built, problems = BuiltVariant.read(folder(tmp_path, meta()))
    assert problems == [] and built is not None
    assert built.metadata.backend.type is Backend.CPU and built.metadata.version == 1
    assert built.name == "torch-cpu"


@pytest.mark.parametrize("key", REQUIRED)
def test_every_required_key_is_required(tmp_path, key):
    variant = folder(tmp_path, meta(**{key: None}))
    built, problems = BuiltVariant.read(variant)
    assert built is None
    assert [(p.code, p.key, p.message) for p in problems] == [
        ("metadata.missing-key", key, f"metadata.json: missing required key `{key}`")]
    with pytest.raises(BuildError) as info:
        BuiltVariant.load(variant)
    assert info.value.key == key and info.value.message == "required key is missing"
    assert Path(info.value.file) == variant / "metadata.json"


@pytest.mark.parametrize("text, code", [(None, "metadata.missing"), ("{", "metadata.json"),
                                        ("[]", "metadata.shape")])
def test_unreadable_metadata_is_one_problem(tmp_path, text, code):
    built, problems = BuiltVariant.read(folder(tmp_path, text))
    assert built is None and [p.code for p in problems] == [code]


def test_a_backend_outside_the_closed_set_is_a_shape_problem(tmp_path):
    _, problems = BuiltVariant.read(folder(tmp_path, meta(backend={"type": "gpu"})))
    assert [(p.code, p.key) for p in problems] == [("metadata.shape", "backend.type")]
    assert "a backend (cann, cpu, cuda" in problems[0].message


def test_files_ship_everything_but_bytecode_and_the_digest_skips_only_metadata(tmp_path):
    variant = folder(tmp_path, meta())
    rels = [p.relative_to(variant).as_posix() for p in shipped_files(variant)]
    assert rels == ["__init__.py", "data/t.json", "metadata.json"]
    assert sorted(digest_files(variant)) == ["__init__.py", "data/t.json"]
    built = BuiltVariant.load(variant)
    assert built.files() == shipped_files(variant) and built.digest() == digest_files(variant)


def test_what_is_written_reads_back_equal_in_the_loaders_key_order(tmp_path):
    variant = folder(tmp_path, None)
    written = VariantMetadata(
        name="tiny", id="_tiny_cuda_abc1234", version=2, license="mit", python_depends=["einops"],
        kernel_depends=[], backend=BackendInfo(type=Backend.CUDA, archs=["8.0"]),
        upstream="https://github.com/org/tiny",
        digest=Digest(algorithm="sha256", files=digest_files(variant)))
    BuiltVariant.write(variant, written)
    text = (variant / "metadata.json").read_text()
    assert list(json.loads(text)) == ["name", "id", "version", "license", "python-depends",
                                      "kernel-depends", "backend", "upstream", "digest"]
    assert json.loads(text)["backend"] == {"type": "cuda", "archs": ["8.0"]}
    assert BuiltVariant.load(variant).metadata == written


def test_a_local_build_is_refused_for_publishing(tmp_path):
    """`kbuild build --cuda-capabilities 9.0` marks the build; check (and so upload and
    to-wheel, which publish only what check passes) refuses it, naming the capabilities."""
    from kbuild.stages.check import metadata_problems
    provenance = {"kernel-builder": {"version": "0.1.0"},
                  "local-build": {"cuda-capabilities": ["9.0"]}}
    variant = folder(tmp_path, meta(backend={"type": "cuda", "archs": ["9.0"]},
                                    provenance=provenance))
    built = BuiltVariant.load(variant)
    problems = [p for p in metadata_problems(built) if p.code == "metadata.local-build"]
    assert len(problems) == 1 and "capabilities 9.0 only" in problems[0]
    del provenance["local-build"]
    (variant / "metadata.json").write_text(json.dumps(
        meta(backend={"type": "cuda", "archs": ["9.0"]}, provenance=provenance)))
    assert not [p for p in metadata_problems(BuiltVariant.load(variant))
                if p.code == "metadata.local-build"]


def test_absolute_imports_of_the_kernels_own_package_are_flagged_with_the_relative_form(tmp_path):
    """kernels-community #312: the loader renames the package (`tiny_1a2b3c4d`), so `from
    tiny.x import y` fails there; `check` names the file, line and the relative form. Other
    packages, relative imports and TYPE_CHECKING-only imports are not flagged."""
    from kbuild.stages.check import import_problems
    variant = folder(tmp_path, meta())
    (variant / "layers.py").write_text(
        "import typing\nimport tinygrad\nfrom . import ops\nfrom tiny.utils import f, g as h\n"
        "if typing.TYPE_CHECKING:\n    from tiny.types import T\n\n\ndef lazy():\n"
        "    import tiny.sub.mod as m\n    return m\n")
    problems = import_problems(BuiltVariant.load(variant))
    assert [p.code for p in problems] == ["imports.absolute"] * 2
    assert "layers.py:4: `from tiny.utils import f, g as h`" in problems[0]
    assert "write `from .utils import f, g as h`" in problems[0]
    assert "layers.py:10: `import tiny.sub.mod as m`" in problems[1]
    assert "write `from .sub import mod as m`" in problems[1]
    (variant / "layers.py").write_text("from .utils import f\n")
    assert import_problems(BuiltVariant.load(variant)) == []


def test_the_variant_folders_of_a_build_are_one_rule(tmp_path):
    """core/built.py's rule, used by check, sign, upload, verify, clean, the card, dev/test and
    bench: a folder not named with a leading `.` (a link to one too); `built`: holding a
    metadata.json."""
    from kbuild.core.built import is_variant_dir, variant_dirs
    build = tmp_path / "build"
    for name, meta in (("torch-cpu", True), ("broken", False), (".staging", True)):
        (build / name).mkdir(parents=True)
        if meta:
            (build / name / "metadata.json").write_text("{}")
    (build / "notes.txt").write_text("")
    (build / "linked").symlink_to(build / "torch-cpu")
    assert [p.name for p in variant_dirs(build)] == ["broken", "linked", "torch-cpu"]
    assert [p.name for p in variant_dirs(build, built=True)] == ["linked", "torch-cpu"]
    assert not is_variant_dir(build / ".staging", built=True) and is_variant_dir(build / "broken")
    assert variant_dirs(tmp_path / "missing") == [] and variant_dirs(build / "notes.txt") == []
