"""Property: whatever is done to a built variant's metadata.json (keys deleted or renamed,
values of the wrong type, odd strings, unicode), `check`, `to-wheel` and `upload --dry-run`
end in problems or one BuildError, never a traceback; they agree (nothing ships that `check`
refuses); and a variant whose digest or files were tampered with is never packaged or planned
for upload. The CPU variant is built once per session and copied per example."""

from __future__ import annotations

import copy
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kbuild.stages.check import BYTECODE, check_variant
from kbuild.core.errors import BuildError
from kbuild.publish import upload as publish
from kbuild.core.built import BuiltVariant
from kbuild.publish.wheel import build_wheel
from kbuild_hub import HubServer
from kbuild_testing import fresh_copy
from test_publish import variant_of

ODD = ["", " ", ";", "$", "${HOME}", "$ENV{HOME}", '"', "'", "\n", "\r\n", "\x00", "../..",
       "/etc/passwd", "é", "\U0001f642", "a,b", "\u2028", "-1", "sha512", "cpu", "cuda", "img2gray"]
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=6),
                    st.sampled_from(ODD))
keys = st.one_of(st.text(max_size=5), st.sampled_from(ODD))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(keys, inner, max_size=3), max_leaves=5)


def paths(value: Any, here: tuple = ()) -> Iterator[tuple]:
    """Every location in a JSON tree, the root included."""
    yield here
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        yield from paths(child, here + (key,))


def mutate(meta: Any, data: st.DataObject) -> Any:
    where = data.draw(st.sampled_from(list(paths(meta))), label="where")
    kind = data.draw(st.sampled_from(["delete", "replace", "rename"]), label="kind")
    if not where:
        return data.draw(values, label="root") if kind == "replace" else meta
    parent = meta
    for key in where[:-1]:
        parent = parent[key]
    last = where[-1]
    if kind == "delete":
        del parent[last]
    elif kind == "replace":
        parent[last] = data.draw(values, label="value")
    elif isinstance(parent, dict):
        new = data.draw(keys, label="new key")
        parent[new] = parent.pop(last)
    return meta


@pytest.fixture(scope="module")
def setup(builds, tmp_path_factory):
    project = fresh_copy(builds(), tmp_path_factory.mktemp("props") / "img2gray")
    variant = variant_of(project)
    original = json.loads((variant / "metadata.json").read_text())
    with HubServer() as hub:
        yield project, variant, original, hub


def test_the_unmutated_variant_passes_all_three(setup, tmp_path):
    project, variant, _, hub = setup
    assert check_variant(variant, load=False).ok
    assert build_wheel(BuiltVariant.load(variant), tmp_path / "dist").is_file()
    options = publish.UploadOptions(build_dir=variant.parent, dry_run=True, load=False,
                                    endpoint=hub.url, retries=0)
    assert publish.upload(project, options, log=_quiet, warn=_quiet).variants == [variant.name]


@settings(max_examples=100, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_metadata_is_refused_cleanly_and_consistently(setup, data):
    project, built, original, hub = setup
    meta = copy.deepcopy(original)
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        meta = mutate(meta, data)
    tamper = data.draw(st.sampled_from([None, None, None, "_ops.py", "__init__.py", "so"]),
                       label="tamper")
    tampered = tamper is not None or not isinstance(meta, dict) or meta.get("digest") != original["digest"]

    with tempfile.TemporaryDirectory() as tmp:
        build_dir = Path(tmp) / "build"
        variant = build_dir / built.name
        shutil.copytree(built, variant)
        (variant / "metadata.json").write_text(json.dumps(meta))
        if tamper:
            target = next(variant.glob("*.so")) if tamper == "so" else variant / tamper
            target.write_bytes(target.read_bytes() + b"\n# tampered\n")

        report = check_variant(variant, load=False)  # never raises
        accepted = not [p for p in report.problems if p.code != BYTECODE]

        out = Path(tmp) / "dist"
        try:
            build_wheel(BuiltVariant.load(variant), out)
            packaged = True
        except BuildError:
            packaged = False
            assert not out.exists() or not list(out.iterdir())

        options = publish.UploadOptions(build_dir=build_dir, dry_run=True, load=False,
                                        allow_dirty=True, endpoint=hub.url, retries=0)
        try:
            planned = built.name in publish.upload(project, options, log=_quiet, warn=_quiet).variants
        except BuildError:
            planned = False

    event(f"accepted={accepted} packaged={packaged} planned={planned} tampered={tampered}")
    assert not (packaged and not accepted), report.problems
    assert not (planned and not accepted), report.problems
    if tampered:
        assert not (accepted or packaged or planned), meta


def _quiet(_: str) -> None:
    pass
