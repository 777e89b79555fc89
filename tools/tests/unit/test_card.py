"""card: the model card is read from the kernel's own sources (never imported): the module
docstring, the public functions with their signatures, the layers, and the variants uploaded."""

from __future__ import annotations

from pathlib import Path

from kbuild.core import manifest
from kbuild.core.built import BuiltVariant
from kbuild.core.metadata import BackendInfo, VariantMetadata
from kbuild.publish import card
from kbuild_testing import make_project

INIT = '''"""Greyscale images, fast.

More text that is not the summary.
"""
import sys

__all__ = ["to_gray", "Missing"]

raise SystemExit("the card must not import the package")


def to_gray(image: "torch.Tensor", *, scale: float = 1.0) -> "torch.Tensor":
    """Converts an RGB image to grey.

    Details.
    """


def _private(): ...


def helper(x): ...
'''
LAYERS = '''from .norm import RMSNorm as RMSNorm
from ._impl import _Hidden


class Gray:
    """A layer that converts to grey."""
'''


def variant(root: Path, name: str, files: dict[str, str]) -> BuiltVariant:
    path = root / "build" / name
    for rel, text in files.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(text)
    return BuiltVariant(path, VariantMetadata(
        name="demo", id="_demo_cpu_1", version=3, license="mit", python_depends=[],
        kernel_depends=[], backend=BackendInfo(type="cpu")))


def project(tmp_path: Path) -> Path:
    return make_project(tmp_path / "p", 'upstream = "https://github.com/org/demo"\n[torch-noarch]\n')


def test_functions_come_from_all_with_signatures_and_first_doc_lines(tmp_path):
    init = tmp_path / "__init__.py"
    init.write_text(INIT)
    summary, bullets = card.describe_functions(init)
    assert summary == "Greyscale images, fast."
    assert bullets == ['- `to_gray(image: \'torch.Tensor\', *, scale: float=1.0) -> \'torch.Tensor\'`: '
                       "Converts an RGB image to grey.", "- `Missing`"]


def test_without_all_the_public_functions_are_listed(tmp_path):
    init = tmp_path / "__init__.py"
    init.write_text(INIT.replace('__all__ = ["to_gray", "Missing"]\n', ""))
    assert [b.split("(")[0] for b in card.describe_functions(init)[1]] == ["- `to_gray", "- `helper"]


def test_layers_and_their_reexports(tmp_path):
    v = variant(tmp_path, "torch-cpu", {"__init__.py": "", "layers/__init__.py": LAYERS})
    assert card.describe_layers(v.path) == ["- `Gray`: A layer that converts to grey.", "- `RMSNorm`"]


def test_unparsable_sources_give_an_empty_card_section(tmp_path):
    v = variant(tmp_path, "torch-cpu", {"__init__.py": "def (:\n", "layers.py": "class (:\n"})
    assert card.describe_functions(v.path / "__init__.py") == ("", [])
    assert card.describe_layers(v.path) == []


def test_generated_card_names_the_repo_version_variants_and_sources(tmp_path):
    root = project(tmp_path)
    variants = [variant(root, name, {"__init__.py": INIT}) for name in ("torch-cpu", "torch-cuda")]
    text, source = card.card_text(root, manifest.load(root), "org/demo", variants)
    assert source == "generated"
    assert text.startswith("---\nlicense: apache-2.0\ntags:\n- kernels\n---\n\n# demo\n\n"
                           "Greyscale images, fast.\n")
    assert 'demo = get_kernel("org/demo", version=1)\ndemo.to_gray(...)\n' in text
    assert "## Variants (version 1)\n\n- `torch-cpu`\n- `torch-cuda`\n" in text
    assert "## Source\n\n- upstream: https://github.com/org/demo\n" in text


def test_card_md_is_used_rendered(tmp_path):
    root = project(tmp_path)
    (root / "CARD.md").write_text("# hand-written for {{ repo_id }}\n")
    v = variant(root, "torch-cpu", {"__init__.py": INIT})
    assert card.card_text(root, manifest.load(root), "org/demo", [v]) == (
        "# hand-written for org/demo", "CARD.md")  # minijinja drops the final newline too
