"""Older build.toml editions (upstream's 1-4) are upgraded to edition 5 in memory, step by step."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from kbuild.core import editions, manifest
from kbuild.core.errors import BuildError

PATH = Path("/project/build.toml")


def upgraded(text: str) -> tuple[dict, list[str], manifest.Manifest]:
    raw = tomllib.loads(text)
    data, notes = editions.upgrade(raw)
    in_place, in_place_notes = editions.upgrade_text(text)  # what `update-build` writes
    assert tomllib.loads(in_place) == data and in_place_notes == notes
    return data, notes, manifest.validate(data, PATH)


def test_edition_1_languages_become_backends():
    data, notes, m = upgraded("""
[general]
name = "act"

[torch]
src = ["torch-ext/torch_binding.cpp"]
universal = false

[kernel.act]
language = "cuda-hipify"
depends = ["torch"]
src = ["act/act.cu"]
rocm-archs = ["gfx942"]

[kernel.act_metal]
language = "metal"
depends = []
src = ["act/act.metal"]
""")
    assert editions.detect_edition(tomllib.loads("[general]\nname='x'\n[kernel.k]\nsrc=[]\n")) == 1
    assert m.general.backends == ["cuda", "metal", "rocm"]
    assert m.kernel["act"].backend == "cuda" and m.kernel["act"].rocm_archs is None
    assert m.kernel["act_rocm"].backend == "rocm" and m.kernel["act_rocm"].rocm_archs == ["gfx942"]
    assert m.kernel["act_metal"].backend == "metal"
    assert (m.general.version, m.general.license, m.general.edition) == (1, "apache-2.0", 5)
    assert "universal" not in data["torch"] and "universal" not in data["general"]
    assert any("hipified" in n for n in notes)


def test_edition_1_universal_is_noarch_for_every_backend():
    _, _, m = upgraded("""
[general]
name = "tri"

[torch]
pyext = ["py", "json"]
universal = true
""")
    assert m.is_noarch and m.torch is None and m.torch_noarch.pyext == ["py", "json"]
    assert m.general.backends == editions.UNIVERSAL_BACKENDS


def test_edition_2_cuda_bounds_and_dependencies_move():
    data, notes, m = upgraded("""
[general]
name = "mm"
universal = false
cuda-minver = "12.4"
cuda-maxver = "12.9"
python-depends = ["einops", "nvidia-cutlass-dsl"]

[general.hub]
repo-id = "org/mm"

[torch]
src = ["torch-ext/torch_binding.cpp"]
minver = "2.8"

[kernel.mm]
backend = "cuda"
depends = ["torch", "cutlass_3_5"]
src = ["mm/mm.cu"]
""")
    assert editions.detect_edition(tomllib.loads(
        "[general]\nname='x'\n[kernel.k]\nbackend='cuda'\n")) == 2
    assert (m.general.cuda.minver, m.general.cuda.maxver) == ("12.4", "12.9")
    assert m.general.python_depends == ["einops"]
    assert m.general.cuda.python_depends == ["nvidia-cutlass-dsl"]
    assert m.general.backends == ["cuda"] and m.general.hub.repo_id == "org/mm"
    assert m.torch.minver == "2.8" and m.kernel["mm"].depends == ["torch", "cutlass_3_5"]


def test_edition_3_without_framework_is_noarch():
    _, notes, m = upgraded("""
[general]
name = "tri"
backends = ["cuda", "rocm"]
""")
    assert m.is_noarch and m.general.backends == ["cuda", "rocm"]
    assert (m.general.version, m.general.license) == (1, "apache-2.0")
    assert any("check it" in n for n in notes)


def test_edition_4_only_gains_the_edition():
    text = """
[general]
name = "kk"
version = 3
license = "mit"
backends = ["cpu"]

[torch-noarch]
"""
    data, notes, m = upgraded(text)
    assert editions.detect_edition(tomllib.loads(text)) == 4
    assert notes == ["set `general.edition = 5` (was 4)"] and m.general.version == 3
    assert {k: v for k, v in data["general"].items() if k != "edition"} == tomllib.loads(text)["general"]


def test_edition_5_is_left_alone():
    raw = tomllib.loads((Path(__file__).resolve().parents[3] / "build.toml").read_text())
    data, notes = editions.upgrade(raw)
    assert data is raw and notes == []


@pytest.mark.parametrize("text", [
    "general = [1, 2]",
    "[general]\nname = 'x'\nkernel = 3",
    "kernel = 'x'\n[general]\nname = 'x'",
    "[general]\nname = 'x'\n[kernel]\nk = 1",
    "[general]\nname = 'x'\ncuda = 'x'\ncuda-minver = '12.0'\nuniversal = 'yes'",
    "[general]\nname = 'x'\npython-depends = 'einops'\n[torch]\nuniversal = 1",
    "[general]\nname = 'x'\n[general.cuda]\npython-depends = 'x'\n[general.python-depends]",
    "[general]\nedition = 'five'",
    "[general]\nedition = -3",
    "[kernel.k]\nlanguage = 'fortran'\n[general]\nname = 'x'",
])
def test_data_of_the_wrong_shape_is_left_for_the_model(text):
    data, _ = editions.upgrade(tomllib.loads(text))
    with pytest.raises(BuildError) as info:
        manifest.validate(data, PATH)
    assert info.value.file == PATH


def test_edition_4_is_read_without_a_warning_and_older_ones_warn(tmp_path):
    """Upstream reads edition 4 (47 of kernels-community's 52 manifests) without a word; an
    edition that needed real changes is still said, once per command."""
    said: list[str] = []
    for source in ("torch-ext/torch_binding.cpp", "csrc/cc.cpp", "torch-ext/cc/__init__.py"):
        (tmp_path / source).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / source).write_text("")
    (tmp_path / "build.toml").write_text(EDITION_4)
    manifest.load(tmp_path, warn=said.append)
    assert said == []
    (tmp_path / "build.toml").write_text(EDITION_4.replace('license = "MIT"\n', ""))  # edition 3
    manifest.load(tmp_path, warn=said.append)
    assert len(said) == 1 and "edition 3" in said[0] and "update-build" in said[0]


# An edition 4 manifest written the way kernels-community's commented ones are (msa,
# flash-attn3, vllm-moe): comments inside [general] and before a table, an inline comment,
# uneven spacing, a multi-line array.
EDITION_4 = '''# Built with kernel-builder.
[general]
name = "cc"   # the Hub name
backends = [
  "cpu",   # first
  "cuda",
]
# The licence of the vendored code
# decides this one.
license = "MIT"
version = 0

[general.hub]
repo-id = "org/cc"

[torch]
src = ["torch-ext/torch_binding.cpp"]

# Host-side helpers.
[kernel.cc]
backend   = "cpu"
depends = ["torch"]
src = ["csrc/cc.cpp"]
'''


def changed_lines(before: str, after: str) -> tuple[list[str], list[str]]:
    """The lines removed and the lines added (difflib's view of the edit)."""
    import difflib
    diff = list(difflib.ndiff(before.splitlines(), after.splitlines()))
    return ([d[2:] for d in diff if d.startswith("- ")], [d[2:] for d in diff if d.startswith("+ ")])


def test_in_place_upgrade_of_edition_4_adds_one_line_and_keeps_the_rest():
    text, notes = editions.upgrade_text(EDITION_4)
    assert notes == ["set `general.edition = 5` (was 4)"]
    assert changed_lines(EDITION_4, text) == ([], ["edition = 5"])
    assert text.index("edition = 5") == text.index("version = 0") + len("version = 0\n")
    assert editions.upgrade_text(text) == (text, [])  # edition 5 is left as it is


def test_in_place_upgrade_of_edition_2_changes_only_what_the_upgrade_needs():
    before = '''# mm: a matmul
[general]
name = "mm"   # kept
universal = false
cuda-minver = "12.4"  # bounds move to [general.cuda]
python-depends = ["einops", "nvidia-cutlass-dsl"]

# The binding.
[torch]
src = ["torch-ext/torch_binding.cpp"]

[kernel.mm]
backend = "cuda"
depends = ["torch"]
src = ["mm/mm.cu"]   # one file
'''
    text, _ = editions.upgrade_text(before)
    removed, added = changed_lines(before, text)
    assert removed == ["universal = false", 'cuda-minver = "12.4"  # bounds move to [general.cuda]',
                       'python-depends = ["einops", "nvidia-cutlass-dsl"]']
    assert 'python-depends = ["einops"]' in added and "edition = 5" in added
    for line in before.splitlines():  # every comment, and every line not upgraded, is kept
        assert line in text.splitlines() or line in removed
    assert manifest.validate(tomllib.loads(text), PATH).general.cuda.minver == "12.4"


def corpus_manifests() -> list[tuple[str, str]]:
    """The edition 4 build.toml files of kernels-community's projects beside the checkout."""
    import tarfile
    from kbuild_testing import REPO
    root = REPO.parent / "shared" / "corpus"
    found = []
    for archive in sorted(root.glob("kernels-community-*.tar.gz")):
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                if member.isfile() and member.name.count("/") == 1 and member.name.endswith("/build.toml"):
                    found.append((member.name, tar.extractfile(member).read().decode()))
    return found


def commented(text: str) -> str:
    """`text` with comments where kernels-community writes them: a header, lines inside
    [general] before a key, an inline one, and one before each [kernel.*] table."""
    lines = ["# A kernels-community project.", *text.splitlines()]
    at = next(i for i, line in enumerate(lines) if line.startswith("license"))
    lines[at:at] = ["# The licence of the vendored code", "# decides this one."]
    at = next(i for i, line in enumerate(lines) if line.startswith("name"))
    lines[at] += "  # the Hub name"
    out = []
    for line in lines:
        if line.startswith("[kernel."):
            out.append(f"# {line.strip('[]')}: built for its backend.")
        out.append(line)
    return "\n".join(out) + "\n"


def test_in_place_upgrade_of_the_community_manifests_only_adds_the_edition():
    manifests = [(name, text) for name, text in corpus_manifests()
                 if editions.detect_edition(tomllib.loads(text)) == 4]
    if not manifests:
        pytest.skip("no kernels-community projects beside the checkout (shared/corpus/*.tar.gz, "
                    "test input kept outside the repository)")
    for name, original in manifests:
        for before in (original, commented(original)):
            text, notes = editions.upgrade_text(before)
            assert changed_lines(before, text) == ([], ["edition = 5"]), name
            assert tomllib.loads(text) == editions.upgrade(tomllib.loads(before))[0], name
            manifest.validate(tomllib.loads(text), PATH)
