"""publish/api.py's comparison of two public APIs: what breaks a caller of the old one."""

from __future__ import annotations

import inspect

import pytest

from kbuild.publish.api import compare, params_compatible, schema_compatible


def params(fn) -> list:
    """As the probe records them (resources/scripts/probe_variant.py)."""
    return [[p.name, p.kind.name, p.default is not inspect.Parameter.empty]
            for p in inspect.signature(fn).parameters.values()]


def f_base(x, y=1, *, z=2): ...
def f_default_added(x, y=1, w=3, *, z=2, v=4): ...
def f_kwargs_added(x, y=1, *args, z=2, **kw): ...
def f_required_added(x, y=1, w=None, *, z=2, v): ...
def f_renamed(a, y=1, *, z=2): ...
def f_reordered(y, x=1, *, z=2): ...
def f_default_dropped(x, y, *, z=2): ...
def f_removed_param(x, *, z=2): ...
def f_keyword_dropped(x, y=1): ...
def f_keyword_to_positional(x, y=1, z=2): ...
def f_annotated(x: int, y: float = 1, *, z: str = 2) -> int: ...


@pytest.mark.parametrize("new, ok", [
    (f_base, True), (f_default_added, True), (f_kwargs_added, True), (f_annotated, True),
    (f_keyword_to_positional, True),
    (f_required_added, False), (f_renamed, False), (f_reordered, False),
    (f_default_dropped, False), (f_removed_param, False), (f_keyword_dropped, False)])
def test_parameters(new, ok):
    assert params_compatible(params(f_base), params(new)) is ok


def test_positional_only_names_are_free_but_varargs_stay():
    def old(a, /, *args): ...
    def renamed(b, /, *args): ...
    def no_varargs(a, /): ...
    assert params_compatible(params(old), params(renamed))
    assert not params_compatible(params(old), params(no_varargs))


@pytest.mark.parametrize("new, ok", [
    ("f(Tensor x, Tensor(a!) out) -> ()", True),
    ("f(Tensor x, Tensor(a!) out, int n=1, *, float eps=1e-05) -> ()", True),
    ("f(Tensor x, Tensor(a!) out, int n) -> ()", False),        # a required argument
    ("f(Tensor x, Tensor out) -> ()", False),                    # aliasing changed
    ("f(Tensor y, Tensor(a!) out) -> ()", False),                # renamed
    ("f(Tensor x) -> ()", False),                                # removed
    ("f(Tensor x, Tensor(a!) out) -> Tensor", False),            # returns
    ("f(Tensor x, Tensor(a!) out, int[2] s=[1, 2]) -> ()", True)])
def test_op_schemas(new, ok):
    assert schema_compatible("f(Tensor x, Tensor(a!) out) -> ()", new) is ok


def test_compare_reports_additions_removals_and_changes_with_their_verdicts():
    def entry(fn, kind="function"):
        return {"kind": kind, "signature": str(inspect.signature(fn)), "params": params(fn)}
    old = {"python": {"f": entry(f_base), "g": entry(f_base),
                      "K": {"kind": "value", "type": "int"}},
           "layers": {"Norm": entry(f_base, "layer")},
           "ops": {"f": "f(Tensor x) -> ()", "g": "g(Tensor x) -> ()"}}
    new = {"python": {"f": entry(f_default_added), "h": entry(f_base),
                      "K": {"kind": "value", "type": "str"}},
           "layers": {"Norm": entry(f_renamed, "layer")},
           "ops": {"f": "f(Tensor x, int n=1) -> ()", "h": "h() -> ()"}}
    found = {(c.symbol, c.change): c.breaking for c in compare("v", old, new)}
    assert found == {
        ("function f", "changed"): False, ("function g", "removed"): True,
        ("function h", "added"): False, ("value K", "changed"): True,
        ("layer Norm", "changed"): True,
        ("op f", "changed"): False, ("op g", "removed"): True, ("op h", "added"): False}
    assert compare("v", old, old) == []
