"""Property: any mutation of a valid build.toml (keys deleted, renamed or added, values of the
wrong type, strings full of CMake/shell metacharacters and unicode) ends in a valid Manifest and
plan, or in one BuildError naming build.toml and the key. Never another exception, and nothing is
written. What passes carries no control characters and only names of the strict forms."""

from __future__ import annotations

import datetime
import re
import shutil
from pathlib import Path
from unittest import mock

import pytest
import tomli_w
import tomllib
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbuild.stages import plan
from kbuild.core import manifest
from kbuild.core.errors import BuildError
from kbuild.core.manifest import forms
from kbuild_testing import REPO, copy_project, fake_toolkit, fake_torch

NASTY = ['${HOME}', '$ENV{PATH}', '")\nexecute_process(COMMAND touch PWNED)\n#', '; rm -rf /',
         "`id`", "$(id)", "'", '"', "\\", "a;b", "../..", "../../etc/passwd", "/etc/passwd",
         "~/x", "\x00", "\n", "é", "名前", "🙂", "", " ", "-", "cpu", "cuda", "rocm", "torch",
         "2.9", "13.0", "9.0a", "10.0f", "8.0+PTX", "gfx942", "cutlass_3_8", "org/name",
         "csrc/img2gray.cu", "csrc/img2gray.h", "csrc", "main", "py", "img2gray", "img2gray_cpu"]
strings = st.one_of(st.sampled_from(NASTY), st.text(
    alphabet=st.sampled_from(list("abcAZ09_-./; $ {}\"'\n\\()#é名🙂\x00\t")), max_size=12))
scalars = st.one_of(strings, st.integers(-3, 2**40), st.booleans(),
                    st.floats(allow_nan=False), st.dates(), st.just(datetime.time(1, 2)))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(strings, inner, max_size=3)), max_leaves=6)

NOARCH = """\
[general]
name = "img2gray"
version = 1
edition = 5
license = "apache-2.0"
backends = ["cuda", "rocm", "cpu"]

[torch-noarch]
pyext = ["py", "json"]
cuda-capabilities = ["8.0", "9.0a"]
rocm_archs = ["gfx942"]
"""
FULL_EXTRA = """
upstream = "https://github.com/org/img2gray"
kernel-depends = [{ repo-id = "org/dep", version = 2 }]

[general.cuda]
minver = "12.6"
python-depends = ["nvidia-cutlass-dsl"]

[general.neuron]
python-depends = ["nki"]

[kernel.img2gray_rocm]
backend = "rocm"
depends = ["torch"]
src = ["csrc/img2gray.cu", "csrc/img2gray_convert.cuh"]
rocm-archs = ["gfx942"]
"""


def bases() -> list[str]:
    text = (REPO / "build.toml").read_text()
    full = text.replace('backends = ["cpu", "cuda"]', 'backends = ["cpu", "cuda", "rocm", "neuron"]')
    full = full.replace('license = "apache-2.0"\n', 'license = "apache-2.0"\n' +
                        FULL_EXTRA.split("\n[general.cuda]")[0].lstrip("\n") + "\n")
    full = full.replace('include = ["csrc"]\n', 'include = ["csrc"]\nminver = "2.9"\n'
                        'cxx-flags = ["-DX=1"]\n', 1)
    full += "\n[general.cuda]" + FULL_EXTRA.split("\n[general.cuda]")[1]
    full = full.replace('backend = "cuda"\n', 'backend = "cuda"\ncuda-minver = "12.8"\n'
                        'cuda-capabilities = ["9.0a", "10.0f", "12.1"]\n', 1)
    return [text, full, NOARCH]


BASES = [tomllib.loads(t) for t in bases()]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("props")
    copy_project(root / "img2gray")
    return root


def paths(data, prefix=()):
    """Every position in nested TOML data, as a key path."""
    out = [prefix]
    if isinstance(data, dict):
        for k, v in data.items():
            out += paths(v, prefix + (k,))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out += paths(v, prefix + (i,))
    return out


def parent_of(data, path):
    for part in path[:-1]:
        data = data[part]
    return data


def mutate(data, draw):
    path = draw(st.sampled_from(paths(data)[1:] or [()]))
    if not path:
        return data
    parent, last = parent_of(data, path), path[-1]
    op = draw(st.sampled_from(["delete", "rename", "retype", "add", "append"]))
    if op == "delete":
        del parent[last]
    elif op == "rename" and isinstance(parent, dict):
        known = ["src", "srcs", "backend", "depends", "name", "cuda-flags", "cuda_flags",
                 "minver", "maxver", "edition", "stable-abi", "language", "universal"]
        parent[draw(st.one_of(strings, st.sampled_from(known)))] = parent.pop(last)
    elif op == "add" and isinstance(parent[last], dict):
        parent[last][draw(strings)] = draw(values)
    elif op == "append" and isinstance(parent[last], list):
        parent[last].append(draw(strings))
    else:
        parent[last] = draw(values)
    return data


def listing(root: Path) -> dict[str, int]:
    return {p.relative_to(root).as_posix(): p.stat().st_size if p.is_file() else -1
            for p in root.rglob("*") if p.name != "build.toml"}


CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def strings_of(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from strings_of(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings_of(v)


def plan_all(project: Path, m: manifest.Manifest) -> None:
    toolkit = fake_toolkit("13.0", ["7.5", "8.0", "8.6", "8.9", "9.0", "9.0a", "10.0", "10.0a",
                                    "10.0f", "12.0", "12.1"])
    with mock.patch.object(plan, "find_cuda", lambda torch, _: toolkit):
        for backend in m.general.backends:
            try:
                if m.is_noarch:
                    plan.plan_noarch(project, m, backend)
                else:
                    torch = fake_torch("2.13.0", cuda="13.0" if backend == "cuda" else None)
                    plan.plan_variant(project, m, torch, backend)
            except BuildError as e:
                check_error(e, project)


def check_error(err: BuildError, project: Path) -> None:
    assert Path(err.file) == project / "build.toml", str(err)
    assert err.key, str(err)
    assert "\n" not in err.message and "\n" not in err.key and "\n" not in (err.hint or ""), str(err)


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.data())
def test_mutated_manifests_end_in_a_plan_or_a_named_error(workspace, data):
    project = workspace / "img2gray"
    base = data.draw(st.sampled_from(range(len(BASES))))
    raw = tomllib.loads(tomli_w.dumps(BASES[base]))  # a deep copy
    for _ in range(data.draw(st.integers(1, 3))):
        raw = mutate(raw, data.draw)
    (project / "build.toml").write_text(tomli_w.dumps(raw), encoding="utf-8")
    before = listing(workspace)
    try:
        m = manifest.load(project)
    except BuildError as e:
        check_error(e, project)
    else:
        assert forms.NAME_RE.match(m.general.name)
        assert all(forms.KERNEL_NAME_RE.match(n) for n in m.kernel)
        assert not any(CONTROL.search(s) for s in strings_of(m.model_dump()))
        plan_all(project, m)
    assert listing(workspace) == before


def test_the_bases_are_valid(workspace):
    project = workspace / "img2gray"
    for raw in BASES:
        (project / "build.toml").write_text(tomli_w.dumps(raw), encoding="utf-8")
        m = manifest.load(project)
        plan_all(project, m)
    shutil.copy2(REPO / "build.toml", project / "build.toml")
