"""card: CARD.md rendered as kernel-builder's `fill-card` renders it (minijinja 2.19, the version
its Cargo.lock pins, with trim_blocks; the eight variables read from build.toml and the package's
sources, never imported), compared with minijinja itself; every template or front-matter error
is one BuildError naming CARD.md and the line; `kbuild card` and `kbuild check`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kbuild.core import manifest
from kbuild.core.errors import BuildError
from kbuild.publish import card
from kbuild_testing import invoke

BUILD_TOML = """\
[general]
name = "demo-kernel"
version = 3
edition = 5
license = "Apache-2.0"
backends = ["cpu"]
upstream = "https://GitHub.com/Org/Demo"
{hub}
[torch-noarch]
"""
INIT = '''"""Demo."""
__all__: list = ["annotated_is_not_it"]
__all__ = ("a tuple", "is not it either")
__all__ = []
__all__ = ["relu", 3, "layers", "gelu"]
__all__ = ["the second list is never read"]

raise SystemExit("the card must not import the package")
'''
LAYERS = '''class ReLU:
    class Inner:  # not top-level
        pass


class _Private:
    pass


def not_a_class():
    pass
'''
# The constructs kernels-community's cards use: a front matter made by a block, loops, indexing,
# `{% if %}` on lists and none, and a value written as it is.
TEMPLATE = """---
library_name: kernels
{% if license %}license: {{ license }}
{% endif %}---

Card of {{ repo_id }}.
{% if functions %}

```python
k = get_kernel("{{ repo_id }}", version={{ version }})
{{ functions[0] }} = k.{{ functions[0] }}
```
{% else %}

No usage example.
{% endif %}

## Functions
{% for func in functions %}
- `{{ func }}`
{% endfor %}
{% if layers %}

## Layers
{% for layer in layers %}
- `{{ layer }}`
{% endfor %}
{% endif %}
{% if has_benchmark %}
Benchmark: `kernels benchmark {{ repo_id }} --version {{ version }}`.
{% endif %}
{% if upstream %}
From {{ upstream }}.
{% endif %}
{% if source %}
Source {{ source }}.
{% endif %}
version={{ version }} benchmark={{ has_benchmark }} source={{ source }}
"""


def demo(root: Path, *, hub: str = '[general.hub]\nrepo-id = "org/demo-kernel"\n',
         init: str = INIT, layers: str | None = LAYERS, benchmark: bool = True,
         card_text: str | None = TEMPLATE) -> Path:
    package = root / "torch-ext" / "demo_kernel"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(init)
    if layers is not None:
        (package / "layers").mkdir()
        (package / "layers" / "__init__.py").write_text(layers)
        (package / "layers.py").write_text("class FromTheFlatModule:\n    pass\n")
    if benchmark:
        (root / "benchmarks").mkdir()
        (root / "benchmarks" / "benchmark.py").write_text("")
    (root / "build.toml").write_text(BUILD_TOML.format(hub=hub))
    if card_text is not None:
        (root / "CARD.md").write_text(card_text)
    return root


def render(root: Path, text: str | None = None, repo_id: str | None = None) -> str:
    return card.render_card(root, manifest.load(root), repo_id, text)


def test_the_variables_are_kernel_builders(tmp_path):
    root = demo(tmp_path / "p")
    assert card.card_variables(root, manifest.load(root)) == {
        "repo_id": "org/demo-kernel", "version": 3,
        "functions": ["relu", "gelu"],   # the first non-empty __all__ list, "layers" left out
        "layers": ["ReLU", "_Private"],  # top-level classes of layers/__init__.py (before layers.py)
        "has_benchmark": True,
        "upstream": "https://github.com/Org/Demo", "source": None,  # as a URL prints
        "license": "apache-2.0"}


@pytest.mark.parametrize("init, functions, layers", [
    ('__all__ = ["layers"]\n', None, ["ReLU", "_Private"]),   # only layers: no functions
    ('__all__ = ["relu"]\n', ["relu"], None),                  # layers not exported: none
    ("", None, None),                                          # no __all__
    ("__all__ = [\n", None, None),                             # unparsable
])
def test_functions_and_layers_follow_all(tmp_path, init, functions, layers):
    root = demo(tmp_path / "p", init=init)
    variables = card.card_variables(root, manifest.load(root))
    assert (variables["functions"], variables["layers"]) == (functions, layers)


def test_layers_from_a_flat_module_and_no_benchmark(tmp_path):
    root = demo(tmp_path / "p", benchmark=False)
    (root / "torch-ext" / "demo_kernel" / "layers" / "__init__.py").unlink()
    (root / "torch-ext" / "demo_kernel" / "layers").rmdir()
    variables = card.card_variables(root, manifest.load(root))
    assert variables["layers"] == ["FromTheFlatModule"] and variables["has_benchmark"] is False


def test_a_package_file_linked_out_of_the_project_is_not_read(tmp_path):
    outside = tmp_path / "elsewhere.py"
    outside.write_text('__all__ = ["secret_name"]\n')
    root = demo(tmp_path / "p")
    init = root / "torch-ext" / "demo_kernel" / "__init__.py"
    init.unlink()
    init.symlink_to(outside)
    assert card.card_variables(root, manifest.load(root))["functions"] is None


EXPECTED = """---
library_name: kernels
license: apache-2.0
---

Card of org/demo-kernel.

```python
k = get_kernel("org/demo-kernel", version=3)
relu = k.relu
```

## Functions
- `relu`
- `gelu`

## Layers
- `ReLU`
- `_Private`
Benchmark: `kernels benchmark org/demo-kernel --version 3`.
From https://github.com/Org/Demo.
version=3 benchmark=true source=none"""


def test_rendering_with_trim_blocks(tmp_path):
    root = demo(tmp_path / "p")
    assert render(root) == EXPECTED  # the final newline goes, as minijinja's does


@pytest.mark.parametrize("template", [
    TEMPLATE,
    "{{ version }} {{ has_benchmark }} {{ source }} {{ functions|length }}\n",
    "{% for f in functions %}{{ loop.index }}:{{ f|upper }}{% if not loop.last %}, {% endif %}"
    "{% endfor %}\n\n\n",
    "  {% if layers %}\n  x\n  {% endif %}\n{{ license }}{# a comment #}\n",
    "plain *Markdown*, no template at all\n",
])
@pytest.mark.parametrize("benchmark", [True, False])
def test_the_same_text_as_kernel_builders_renderer(tmp_path, template, benchmark):
    minijinja = pytest.importorskip("minijinja", reason="minijinja (the test extra) compares "
                                                         "renderings")
    root = demo(tmp_path / "p", benchmark=benchmark)
    variables = card.card_variables(root, manifest.load(root))
    theirs = minijinja.Environment(trim_blocks=True, pycompat=False)
    assert render(root, template) == theirs.render_str(template, **variables)


def test_a_list_is_written_as_kernel_builder_writes_it(tmp_path):
    # Rust's minijinja 2.19 writes a list with its items' debug form (minijinja's Python binding
    # writes Python's repr instead, so it cannot be the reference here).
    root = demo(tmp_path / "p")
    assert render(root, "{{ functions }} {{ layers }}") == '["relu", "gelu"] ["ReLU", "_Private"]'


def test_a_plain_card_is_sent_as_it_is(tmp_path):
    root = demo(tmp_path / "p", card_text="---\nlicense: mit\n---\n# Hand-written\n")
    assert render(root) == "---\nlicense: mit\n---\n# Hand-written"


def test_repo_id_is_needed_only_by_a_card_that_uses_it(tmp_path):
    root = demo(tmp_path / "p", hub="")
    with pytest.raises(BuildError) as caught:
        render(root)
    assert str(caught.value).startswith(f"{root / 'CARD.md'}:6: the card uses repo_id, and "
                                        "build.toml has no [general.hub] repo-id")
    assert "general.hub.repo-id" in str(caught.value)
    assert render(root, "# {{ license }}\n") == "# apache-2.0"
    assert render(root, "{{ repo_id }}", repo_id="other/k") == "other/k"  # upload's --repo-id


@pytest.mark.parametrize("text, where, message", [
    ("---\nlicense: x\n---\n\n{% if functions %}\nno end\n", 6, "Unexpected end of template"),
    ("# {{ repo_id }}\n\n{{ licence }}\n", 3, "'licence' is undefined (the card's variables: "
                                              "repo_id, version"),
    ("a\n{{ functions.__class__ }}\n", 2, "unsafe"),     # the sandbox
    ("a\n\n\n{{ version / 0 }}\n", 4, "division by zero"),
    ("{% for x in range(10**7) %}{% endfor %}", 1, "Range too big"),
])
def test_template_errors_are_one_line_naming_card_md_and_the_line(tmp_path, text, where, message):
    root = demo(tmp_path / "p", card_text=text)
    with pytest.raises(BuildError) as caught:
        render(root)
    first = str(caught.value).splitlines()[0]
    assert first.startswith(f"{root / 'CARD.md'}:{where}: template error: ") and message in first


@pytest.mark.parametrize("text, message", [
    ("---\nlibrary_name: kernels\nlicense: [apache\n---\n# x\n", "front matter (line 3 of the "
     "rendered card) is not valid YAML: expected ',' or ']'"),
    ("---\nlicense: mit\nbad line\n---\n# x\n", "front matter (line 3 of the rendered card) is not "
     "valid YAML: could not find expected ':'"),
    ("---\n- a list\n---\n", "front matter (line 2 of the rendered card) is a list, not a mapping"),
    ("---\nlicense: mit\n# never closed\n", "the front matter opened by --- on line 1 is never "
     "closed"),
    # kernels-community's front matter as the template is, unrendered, is what the Hub refused
    ("---\n{{ '{%' }} if license %}license: x\n---\n", "front matter (line 2 of the rendered "
     "card) is not valid YAML"),
])
def test_front_matter_errors_name_card_md_and_the_rendered_line(tmp_path, text, message):
    root = demo(tmp_path / "p", card_text=text)
    with pytest.raises(BuildError) as caught:
        render(root)
    assert str(caught.value).startswith(f"{root / 'CARD.md'}: {message}"), str(caught.value)


def test_a_card_linked_out_of_the_project_is_refused(tmp_path):
    outside = tmp_path / "secret.txt"
    outside.write_text("not for the Hub\n")
    root = demo(tmp_path / "p", card_text=None)
    (root / "CARD.md").symlink_to(outside)
    with pytest.raises(BuildError, match="not a file of the project"):
        render(root)


def test_kbuild_card_prints_or_writes_the_rendered_card(tmp_path):
    root = demo(tmp_path / "p")
    printed = invoke("card", str(root))
    assert printed.exit_code == 0 and printed.stdout == EXPECTED
    out = tmp_path / "out" / "README.md"
    out.parent.mkdir()
    written = invoke("card", str(root), "--output", str(out))
    assert written.exit_code == 0 and out.read_text() == EXPECTED
    assert [p.name for p in out.parent.iterdir()] == ["README.md"]  # no temporary file left

    # Without CARD.md: the generated card, from the package's sources (nothing built yet).
    (root / "CARD.md").unlink()
    (root / "torch-ext" / "demo_kernel" / "__init__.py").write_text(
        '__all__ = ["relu"]\n\n\ndef relu(x, inplace=False):\n    """ReLU, fast."""\n')
    generated = invoke("card", str(root))
    assert generated.exit_code == 0, generated.output
    assert '- `relu(x, inplace=False)`: ReLU, fast.' in generated.stdout
    assert 'get_kernel("org/demo-kernel", version=3)' in generated.stdout


def test_kbuild_check_refuses_a_broken_card_before_the_variants(tmp_path):
    root = demo(tmp_path / "p", card_text="# {{ licence }}\n")
    refused = invoke("check", str(root))  # main() prints a BuildError as one `error:` line
    assert isinstance(refused.exception, BuildError)
    assert str(refused.exception).startswith(f"{root / 'CARD.md'}:1: template error: 'licence' "
                                             "is undefined")
    (root / "CARD.md").write_text("# fine\n")
    result = invoke("check", str(root))
    assert isinstance(result.exception, BuildError) and "no variants to check" in str(
        result.exception)  # the card passed; no build yet


def test_nothing_outside_the_project_is_written_by_card_output_through_a_link(tmp_path):
    root = demo(tmp_path / "p")
    target = tmp_path / "target.txt"
    target.write_text("kept\n")
    link = tmp_path / "link.md"
    link.symlink_to(target)
    assert invoke("card", str(root), "--output", str(link)).exit_code == 0
    assert target.read_text() == "kept\n" and not link.is_symlink()
    assert link.read_text() == EXPECTED
    assert os.listdir(tmp_path).count("link.md") == 1
