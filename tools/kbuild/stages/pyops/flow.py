"""The rule applied at every call of the package, and op names followed to their callers.

A registration's name (resolve.py) is judged where it is given; a name that is a parameter of a
package function is judged at each call of that function instead, those seen so far and those
still to come, with the registration it reaches in the reason.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from .names import Ext, Value
from .resolve import Cls, Func, Partial, Resolver, arguments
from .scopes import Package, Scope, dotted


@dataclass(frozen=True)
class Violation:
    path: Path
    line: int
    call: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.call}: {self.reason}"


def shown(expr: ast.expr) -> str:
    text = dotted(expr) or ast.unparse(expr)
    return text if len(text) <= 60 else text[:57] + "..."


class Check:
    def __init__(self, package: Package, sink_of) -> None:
        self.p, self.r, self.sink_of = package, Resolver(package), sink_of
        self.flows: dict = defaultdict(dict)  # function scope: {slot: (sink, "file:line")}
        self.calls: dict = defaultdict(list)  # function scope: [(site, callee, args, keywords)]
        self.found: dict[tuple, Violation] = {}

    def run(self) -> list[Violation]:
        for node, scope in self.p.calls:  # a site: (call, scope, callee as shown, a partial)
            (args, keywords), callees = arguments(node, scope), self.r.eval(node.func, scope)
            for callee in callees:
                self.call((node, scope, shown(node.func), False), callee, args, keywords)
            if Ext("functools.partial") in callees and args:  # partial(f, name): a call of f
                for callee in self.r.eval(*args[0]):
                    self.call((node, scope, shown(args[0][0]), True), callee, args[1:], keywords)
        return list(self.found.values())

    def call(self, site: tuple, callee, args: list, keywords: list) -> None:
        if isinstance(callee, Partial):
            for target in callee.targets:
                self.call(site, target, [*callee.args, *args], [*callee.keywords, *keywords])
        elif sink := self.sink_of(callee):
            if (value := self.name(sink, args, keywords)) is not None:
                node, scope, _, partial = site
                flow = (sink, f"{scope.module.shown}:{node.lineno}")
                self.reach(value, flow, (node, scope, sink.display, partial), sink.reason)
        elif isinstance(callee, Cls) and not callee.instance:  # Class(...) calls its __init__
            for init in self.r.methods(callee.scope, "__init__", set()):
                self.call(site, Func(init, 1), args, keywords)
        elif isinstance(callee, Func):
            self.calls[callee.scope].append(call := (site, callee, args, keywords))
            for slot in list(self.flows[callee.scope]):
                self.through(call, slot)

    def name(self, sink, args: list, keywords: list) -> Value | None:
        """The op name a registration is given (None: none)."""
        if args:
            expr, scope = args[0]
            if isinstance(expr, ast.Starred):
                return self.forwarded(expr.value, scope, ("vararg", 0))
            return self.r.value(expr, scope)
        for key, expr, scope in keywords:
            if key == sink.param or key in sink.keywords:
                return self.r.value(expr, scope)
        return next((self.forwarded(expr, scope, ("kwarg", sink.param))
                     for key, expr, scope in keywords if key is None), None)

    def forwarded(self, expr: ast.expr, scope: Scope, slot: tuple) -> Value | None:
        """The enclosing function's `*args` / `**kwargs`, handed on to a registration."""
        bindings = self.p.lookup(scope, expr.id) if isinstance(expr, ast.Name) else []
        if len(bindings) == 1 and bindings[0].kind == "param" and bindings[0].extra == slot[:1]:
            return Value("param", slot=(bindings[0].scope, slot))
        return None

    def reach(self, value: Value, flow: tuple, site: tuple, reason: str) -> None:
        """A name reaches a registration from a call site: a literal is refused there, a
        parameter followed to its function's calls."""
        if value.kind == "param":
            func, slot = value.slot
            if slot not in self.flows[func]:
                self.flows[func][slot] = flow
                for call in list(self.calls[func]):
                    self.through(call, slot)
        elif flow[0].refuses(value):
            node, scope, display, _ = site
            key = (path := scope.module.shown, node.lineno, node.col_offset, display)
            self.found.setdefault(key, Violation(path, node.lineno, display, reason))

    def through(self, call: tuple, slot: tuple) -> None:
        site, callee, args, keywords = call
        sink, where = flow = self.flows[callee.scope][slot]
        value, default = self.r.argument(callee, slot, args, keywords, site[3])
        what = f"the default of `{slot[-1]}`, " if default else ""
        reason = f"{sink.reason} ({what}passed on to {sink.display} at {where})"
        self.reach(value, flow, site, reason)
