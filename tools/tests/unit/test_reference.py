"""The build.toml reference in docs/authoring.md is generated from the manifest model: every key
of the model is in it, and the committed text is what the generator writes today."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from kbuild.core import reference
from kbuild.core.manifest import Manifest

DOC = Path(__file__).resolve().parents[3] / "docs" / "authoring.md"


def keys(model: type[BaseModel]) -> set[str]:
    """Every (leaf) key alias of the model and its nested models."""
    found = set()
    for name, info in model.model_fields.items():
        tp = reference._strip_none(info.annotation)
        inner = [a for a in (tp, *typing.get_args(tp)) if reference._model(a)]
        if inner:
            found |= keys(inner[0])
        else:
            found.add(info.alias or name)
    return found


def test_every_key_and_table_of_the_model_is_documented():
    text = reference.render()
    for key in keys(Manifest):
        assert f"`{key}`" in text or f"`[{key}]`" in text, key
    for table in ("[general]", "[general.hub]", "[torch]", "[torch-noarch]", "[kernel.<name>]"):
        assert f"#### `{table}`" in text
    assert "**required**" in text


def test_docs_reference_is_current():
    text = DOC.read_text(encoding="utf-8")
    assert reference.splice(text, reference.render()) == text, (
        "docs/authoring.md's build.toml reference is stale: run "
        "`PYTHONPATH=tools python -m kbuild.core.reference docs/authoring.md`")


def test_check_mode_reports_a_stale_file_and_write_mode_fixes_it(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(f"intro\n{reference.BEGIN}\nold\n{reference.END}\nrest\n")
    assert reference.main(["--check", str(doc)]) == 1
    assert reference.main([str(doc)]) == 0
    assert reference.main(["--check", str(doc)]) == 0
    new = doc.read_text()
    assert new.startswith("intro\n") and new.endswith(f"{reference.END}\nrest\n")
    assert "#### `[general]`" in new


def test_types_are_written_for_people():
    assert reference.type_text(list[str]) == "array of string"
    assert reference.type_text(str | None) == "string"
    assert reference.type_text(typing.Literal["cpu", "cuda"]) == 'one of `"cpu"`, `"cuda"`'
    assert reference.type_text(str | dict[str, str]) == "string or table of string"
    assert reference.type_text(typing.Annotated[int, "x"]) == "integer"
    with pytest.raises(ValueError):
        reference.splice("no markers", "x")
