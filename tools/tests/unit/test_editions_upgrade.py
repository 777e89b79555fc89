"""Older build.toml editions (upstream's 1-4) are upgraded to edition 5 in memory, step by step."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import tomli_w

from kbuild.core import editions, manifest
from kbuild.core.errors import BuildError

PATH = Path("/project/build.toml")


def upgraded(text: str) -> tuple[dict, list[str], manifest.Manifest]:
    raw = tomllib.loads(text)
    data, notes = editions.upgrade(raw)
    assert tomllib.loads(tomli_w.dumps(data)) == data  # `update-build` can write it
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
    assert list(data["general"])[:2] == ["name", "edition"]


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
