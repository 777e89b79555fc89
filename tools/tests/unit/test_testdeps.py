"""What a project's tests need (stages/devtest/testdeps.py) and what an environment lacks of it
(matrix/testtools.py `unmet`): flake.nix's pythonCheckInputs in the three forms kernel-builder
projects write them (any other form a warning naming the file, never a guess),
tests/requirements.txt, the variants' python-depends as PyPI names, pytest and numpy."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from kbuild.core.errors import BuildError
from kbuild.core.runner import marked_answer
from kbuild.matrix.testtools import unmet
from kbuild.stages.devtest import testdeps
from kbuild_testing import REPO

CORPUS = REPO.parent / "shared" / "corpus"
FLAKE = """{{
  description = "Flake for a kernel";
  inputs = {{ kernel-builder.url = "github:huggingface/kernels"; }};
  outputs = {{ self, kernel-builder }}:
    kernel-builder.lib.genKernelFlakeOutputs {{
      inherit self;
      path = ./.;
      {body}
    }};
}}
"""


def flake(tmp_path: Path, body: str) -> Path:
    (tmp_path / "flake.nix").write_text(FLAKE.format(body=body))
    return tmp_path


@pytest.mark.parametrize("body, names", [
    ("pythonCheckInputs = ps: with ps; [ einops ];", ["einops"]),
    ("pythonCheckInputs =\n        pkgs: with pkgs; [\n          tqdm\n          py-cpuinfo\n"
     "          importlib-metadata  # for the old loader\n          huggingface-hub\n        ];",
     ["tqdm", "py-cpuinfo", "importlib-metadata", "huggingface-hub"]),
    ("pythonCheckInputs = ps: [ ps.einops ps.rich ];", ["einops", "rich"]),
    # nixpkgs attribute names that are not PyPI's: the small table
    ("pythonCheckInputs = ps: with ps; [ pytorch opencv4 dateutil ];",
     ["torch", "opencv-python", "python-dateutil"]),
    ("/* pythonCheckInputs = ps: [ ps.nope ]; */ pythonCheckInputs = p: with p; [ numpy ];",
     ["numpy"]),
    ("pythonNativeCheckInputs = ps: [ ps.nope ];", []),
])
def test_the_three_forms_are_read(tmp_path, body, names):
    warnings: list[str] = []
    assert testdeps.check_inputs(flake(tmp_path, body), warnings.append) == names
    assert warnings == []


@pytest.mark.parametrize("body", [
    "pythonCheckInputs = ps: with ps; [ einops ] ++ lib.optionals stdenv.isLinux [ triton ];",
    "pythonCheckInputs = ps: [ (ps.callPackage ./einops.nix { }) ];",
    "pythonCheckInputs = ps: [ ps.einops other.rich ];",
    "pythonCheckInputs = ps: with pkgs; [ einops ];",  # `with` something else than the argument
    "pythonCheckInputs = myInputs;",
    "pythonCheckInputs = ps: with ps; [ einops ];\n pythonCheckInputs = ps: [ ps.rich ];",
])
def test_any_other_form_is_a_warning_naming_the_file_never_a_guess(tmp_path, body):
    warnings: list[str] = []
    assert testdeps.check_inputs(flake(tmp_path, body), warnings.append) == []
    assert len(warnings) == 1, warnings
    assert str(tmp_path / "flake.nix") in warnings[0]
    assert "pythonCheckInputs = ps: with ps; [ name1 name2 ];" in warnings[0]
    assert "tests/requirements.txt" in warnings[0]


def test_no_flake_or_no_check_inputs_is_nothing(tmp_path):
    assert testdeps.check_inputs(tmp_path, pytest.fail) == []
    assert testdeps.check_inputs(flake(tmp_path, ""), pytest.fail) == []


@pytest.mark.skipif(not (CORPUS / "kernels-community-40d4194f-subset.tar.gz").is_file(),
                    reason=f"no kernels-community projects in {CORPUS} (test input kept beside "
                           "the checkout, not in it)")
def test_kernels_community_flakes_as_they_are(tmp_path):
    """Their flakes unchanged: each form they write, read without a warning."""
    expected = {"causal-conv1d": ["einops"],                                  # pkgs: with pkgs; [ … ]
                "megablocks": ["tqdm", "py-cpuinfo", "importlib-metadata", "torchmetrics"],
                "mamba-ssm": ["einops", "huggingface-hub", "transformers"],   # ps: with ps; [ … ]
                "relu": [], "rotary": [], "activation": []}
    with tarfile.open(CORPUS / "kernels-community-40d4194f-subset.tar.gz") as tar:
        tar.extractall(tmp_path, members=[m for m in tar.getmembers()
                                          if m.name.endswith("/flake.nix")], filter="data")
    for name, names in expected.items():
        assert testdeps.check_inputs(tmp_path / name, pytest.fail) == names, name


def test_requirements_txt_lines_are_read_and_anything_else_refused(tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "requirements.txt").write_text(
        "# what the tests import\neinops\nnumpy>=1.26  # comment\n\n"
        "tqdm; python_version >= \"3.9\"\ntransformers[torch]==4.*\n")
    assert testdeps.declared(tmp_path) == ["einops", "numpy>=1.26",
                                           'tqdm; python_version >= "3.9"', "transformers[torch]==4.*"]
    for number, line in enumerate(["-r other.txt", "--index-url https://example.org/simple",
                                   "einops @ https://example.org/einops.whl", "./local-package",
                                   "git+https://example.org/x.git", "numpy \\"], 1):
        (tests / "requirements.txt").write_text("rich\n" * number + line + "\n")
        with pytest.raises(BuildError) as e:
            testdeps.declared(tmp_path)
        assert e.value.file == tests / "requirements.txt"
        assert f"line {number + 1} `{line}`" in e.value.message, e.value.message
        assert "\n" not in e.value.message


def variant(folder: Path, backend: str, depends: list[str]) -> Path:
    folder.mkdir(parents=True)
    (folder / "metadata.json").write_text(json.dumps({
        "name": "demo", "id": "_demo_x", "version": 1, "license": "mit",
        "python-depends": depends, "kernel-depends": [], "backend": {"type": backend}}))
    return folder


def test_needs_gather_every_source_once(tmp_path):
    """pytest and numpy (kernel-builder's test interpreter has both), python-depends as PyPI
    names (kernels' own table: tvm-ffi is apache-tvm-ffi), flake.nix, tests/requirements.txt."""
    flake(tmp_path, "pythonCheckInputs = ps: with ps; [ einops rich ];")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "requirements.txt").write_text("rich\nnumpy>=2\n")
    cuda = variant(tmp_path / "build" / "torch-cuda", "cuda", ["einops", "tvm-ffi", "nvidia-cutlass-dsl"])
    cpu = variant(tmp_path / "build" / "torch-cpu", "cpu", ["einops"])
    needs = testdeps.test_needs(tmp_path, (cuda, cpu), pytest.fail)
    assert [n.requirement for n in needs] == ["pytest", "numpy", "einops", "apache-tvm-ffi",
                                             "nvidia-cutlass-dsl", "rich", "numpy>=2"]
    assert {n.requirement: n.source for n in needs}["rich"] == "flake.nix pythonCheckInputs"


def holds(dists: dict[str, str]) -> dict:
    return {"python": "3.11", "dists": dists,
            "markers": {"python_version": "3.11", "sys_platform": "linux",
                        "platform_machine": "x86_64"}}


def test_unmet_is_what_the_environment_lacks():
    env = holds({"torch": "2.14.1+cu130", "numpy": "1.26.4", "pytest": "9.2.0"})
    assert unmet(["pytest", "torch>=2.9", "numpy"], env) == []
    assert unmet(["einops", "numpy>=2", "pytest<9"], env) == ["einops", "numpy>=2", "pytest<9"]
    assert unmet(['tqdm; python_version < "3.10"', 'rich; sys_platform == "linux"'], env) == \
        ['rich; sys_platform == "linux"']


def test_an_answer_is_only_the_marked_object():
    assert marked_answer('KBUILD-X {"a": 1}\nnoise\n', "KBUILD-X ") == {"a": 1}
    assert marked_answer('KBUILD-X {"a": 1}\nKBUILD-X {"a": 2}\n', "KBUILD-X ") == {"a": 2}
    for out in ("5\n", '{"chosen": []}\n', "KBUILD-X 5\n", "KBUILD-X [1]\n", "KBUILD-X {\n", ""):
        assert marked_answer(out, "KBUILD-X ") is None, out
