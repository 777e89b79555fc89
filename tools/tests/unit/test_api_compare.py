"""publish/api.py's comparison of two public APIs: what breaks a caller of the old one."""

from __future__ import annotations

import inspect

import pytest

from kbuild.publish.api import NOT_COMPARED, compare, params_compatible, schema_compatible


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


def entry(fn, kind: str = "function", **kernelize) -> dict:
    """A callable's record as the probe makes it: signature, parameters, defaults (as written),
    and the flags `kernels.kernelize` reads (with its defaults)."""
    sig = inspect.signature(fn)
    return {"kind": kind, "signature": str(sig), "params": params(fn),
            "defaults": {p.name: repr(p.default) for p in sig.parameters.values()
                         if p.default is not inspect.Parameter.empty},
            "kernelize": {"has_backward": True, "can_torch_compile": False, **kernelize}}


def value(v) -> dict:
    return {"kind": "value", "type": type(v).__name__, "value": repr(v)}


def record(python=None, submodules=None, layers=None, ops=None) -> dict:
    return {"python": python or {}, "submodules": submodules or {}, "layers": layers or {},
            "ops": ops or {}}


def verdicts(old: dict, new: dict) -> dict:
    return {(c.symbol, c.change): c.breaking for c in compare("v", old, new)
            if c.change != NOT_COMPARED}


def test_compare_reports_additions_removals_and_changes_with_their_verdicts():
    old = record({"f": entry(f_base), "g": entry(f_base), "K": value(1)},
                 layers={"Norm": entry(f_base, "layer")},
                 ops={"f": "f(Tensor x) -> ()", "g": "g(Tensor x) -> ()"})
    new = record({"f": entry(f_default_added), "h": entry(f_base), "K": value("1")},
                 layers={"Norm": entry(f_renamed, "layer")},
                 ops={"f": "f(Tensor x, int n=1) -> ()", "h": "h() -> ()"})
    assert verdicts(old, new) == {
        ("function f", "changed"): False, ("function g", "removed"): True,
        ("function h", "added"): False, ("value K", "changed"): True,
        ("layer Norm", "changed"): True,
        ("op f", "changed"): False, ("op g", "removed"): True, ("op h", "added"): False}
    assert compare("v", old, old) == []


def test_a_function_removed_from_a_public_submodule_breaks():
    old = record(submodules={"utils": {"kind": "module"}, "utils.f": entry(f_base),
                             "utils.g": entry(f_base)})
    new = record(submodules={"utils": {"kind": "module"}, "utils.g": entry(f_base)})
    changes = compare("v", old, new)
    assert [(c.symbol, c.change, c.breaking) for c in changes] == [
        ("function utils.f", "removed", True)]
    assert changes[0].line() == ("- v: function utils.f removed (was `utils.f(x, y=1, *, z=2)`) "
                                 "[incompatible]")


def f_other_default(x, y=2, *, z=2): ...
def f_other_keyword_default(x, y=1, *, z="2"): ...


@pytest.mark.parametrize("section, name", [("python", "f"), ("submodules", "utils.f")])
@pytest.mark.parametrize("new_fn", [f_other_default, f_other_keyword_default])
def test_a_changed_default_breaks(section, name, new_fn):
    old, new = record(**{section: {name: entry(f_base)}}), record(**{section: {name: entry(new_fn)}})
    (change,) = compare("v", old, new)
    assert (change.symbol, change.change, change.breaking) == (f"function {name}", "changed", True)
    assert change.line().endswith("[incompatible]")
    # a default given where there was none, or another annotation: compatible
    assert not [c for c in compare("v", old, record(**{section: {name: entry(f_annotated)}}))
                if c.breaking]


@pytest.mark.parametrize("flag, before, after, breaking", [
    ("has_backward", True, False, True),
    ("can_torch_compile", True, False, True),
    ("can_torch_compile", False, True, False),   # kernelize may use it in more modes: fine
    ("has_backward", False, True, False)])
def test_a_layer_losing_what_kernelize_reads_breaks(flag, before, after, breaking):
    old = record(layers={"Norm": entry(f_base, "layer", **{flag: before})})
    new = record(layers={"Norm": entry(f_base, "layer", **{flag: after})})
    (change,) = compare("v", old, new)
    assert (change.symbol, change.change, change.breaking) == ("layer Norm", "changed", breaking)
    assert f"{flag} from {before} to {after}" in change.line()
    # a function used as a layer (kernels' func repositories) carries the same flags
    func = compare("v", record({"f": entry(f_base, **{flag: before})}),
                   record({"f": entry(f_base, **{flag: after})}))
    assert [c.breaking for c in func] == [breaking]


def test_a_changed_public_constant_breaks():
    (change,) = compare("v", record({"K": value(5)}, {"utils.EPS": value(1e-6)}),
                        record({"K": value(5)}, {"utils.EPS": value(1e-5)}))
    assert (change.symbol, change.change, change.breaking) == ("value utils.EPS", "changed", True)
    assert change.line() == ("~ v: value utils.EPS changed from `utils.EPS = 1e-06` to "
                             "`utils.EPS = 1e-05` [incompatible]")


def test_values_that_are_not_plain_constants_are_named_as_not_compared():
    def f(x, fn=print): ...
    opaque = {**entry(f), "defaults": {"fn": None}}
    obj = {"kind": "value", "type": "Config", "value": None}
    changes = compare("v", record({"f": opaque, "CFG": obj}), record({"f": opaque, "CFG": obj}))
    (gap,) = changes
    assert (gap.change, gap.breaking) == (NOT_COMPARED, False)
    assert gap.line() == ("? v: not compared: the values of CFG, f(fn=…) (not plain constants: "
                          "only their type is compared)")


def test_a_record_from_before_says_what_it_did_not_compare():
    """An API recorded by an older kbuild (no defaults, kernelize flags, constant values or
    submodules) still compares what it has, and says what it could not."""
    def older(e: dict) -> dict:
        return {k: v for k, v in e.items() if k not in ("defaults", "kernelize", "value")}
    new = record({"f": entry(f_base), "K": value(5)}, {"utils.g": entry(f_base)},
                 {"Norm": entry(f_base, "layer")})
    old = {"python": {"f": older(entry(f_base)), "K": older(value(5))},
           "layers": {"Norm": older(entry(f_base, "layer"))}, "ops": {}}
    (gap,) = compare("v", old, new)  # nothing else: the same API, as far as both say
    assert (gap.change, gap.breaking) == (NOT_COMPARED, False)
    assert gap.line() == (
        "? v: not compared: public submodules; the defaults of f, layer Norm; the kernelize "
        "flags of f, layer Norm; the values of K (the earlier API record predates them)")
    # what it has is still compared
    removed = compare("v", old, record({"K": value(5)}, layers={"Norm": entry(f_base, "layer")}))
    assert ("function f", "removed", True) in [(c.symbol, c.change, c.breaking) for c in removed]
