"""What an expression of the package can be: `Resolver.eval` lists the alternatives.

Each is a `Value` (names.py), an outside name (`Ext`), a package module (`Mod`), a package
function (`Func`; a method: `self` or `cls` bound), a class or an instance of one (`Cls`) or a
`functools.partial` (`Partial`). Names are followed through their bindings (scopes.py) and the
imports between modules; a package function's call is what it returns, its parameters replaced
by the call's arguments. Recursion and questions nested too deep end as unknown.
"""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass

from .names import GENERATED, PREFIX_FN, PREFIXED, UNKNOWN, Ext, Value, as_name, concat, fill, join
from .names import text
from .scopes import FUNCTIONS, Binding, Package, Scope, dotted

MAX_OPEN = 60  # questions open at once before one is answered unknown


@dataclass(frozen=True)
class Mod:
    key: tuple[str, ...]  # a module or folder of the package


@dataclass(frozen=True, eq=False)
class Func:
    scope: Scope     # of the def or lambda
    offset: int = 0  # leading parameters already bound (self, cls)


@dataclass(frozen=True, eq=False)
class Cls:
    scope: Scope
    instance: bool  # an instance of the class, not the class


@dataclass(frozen=True, eq=False)
class Partial:
    targets: tuple  # what functools.partial wraps, and the arguments it binds
    args: tuple
    keywords: tuple


def arguments(call: ast.Call, scope: Scope) -> tuple[list, list]:
    """A call's arguments as [(expr, scope)] and [(keyword, expr, scope)]."""
    return [(a, scope) for a in call.args], [(k.arg, k.value, scope) for k in call.keywords]


class Resolver:
    def __init__(self, package: Package) -> None:
        self.p = package
        self._memo: dict[tuple, list] = {}
        self._open: set[tuple] = set()

    def _once(self, key: tuple, compute) -> list:
        """compute() memoised; a question asked again while open, or too deep, is unknown."""
        if key not in self._memo:
            if key in self._open or len(self._open) > MAX_OPEN:
                return [UNKNOWN]
            self._open.add(key)
            try:
                self._memo[key] = compute() or [UNKNOWN]
            finally:
                self._open.discard(key)
        return self._memo[key]

    def value(self, expr: ast.expr, scope: Scope) -> Value:
        """`expr` as an op name: its alternatives joined."""
        return join([as_name(x) for x in self.eval(expr, scope)])

    def eval(self, expr: ast.AST, scope: Scope) -> list:
        return self._once(("eval", id(expr), id(scope)), lambda: self._eval(expr, scope))

    def _eval(self, e: ast.AST, scope: Scope) -> list:
        v = lambda x: self.value(x, scope)  # noqa: E731
        if isinstance(e, ast.Constant):
            return [text(e.value) if isinstance(e.value, str) else UNKNOWN]
        if isinstance(e, ast.JoinedStr):
            return [concat([v(part) for part in e.values])]
        if isinstance(e, ast.FormattedValue):
            return self.eval(e.value, scope)
        if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Add):
            return [concat([v(e.left), v(e.right)])]
        if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Mod):  # "%s::op" % ns
            first = e.right.elts[0] if isinstance(e.right, ast.Tuple) and e.right.elts else e.right
            return [fill(v(e.left), "%", ("s",), v(first))]
        if isinstance(e, ast.IfExp):
            return self.eval(e.body, scope) + self.eval(e.orelse, scope)
        if isinstance(e, ast.Subscript):  # add_op_namespace_prefix("x").split("::")[0]
            return [PREFIXED if v(e.value) == PREFIXED else UNKNOWN]
        if isinstance(e, ast.Name):
            return [x for b in self.p.lookup(scope, e.id) for x in self.bound(b)]
        if isinstance(e, ast.Attribute):
            out = [x for base in self.eval(e.value, scope) for x in self.member(base, e.attr)]
            for value, vscope in scope.module.attr_values.get(dotted(e), []):  # self.lib = ...
                out += [x for x in self.eval(value, vscope) if x == Ext("torch.library.Library()")]
            return out
        if isinstance(e, ast.Call):
            return self.call(e, scope)
        if isinstance(e, FUNCTIONS):  # a def (with its decorators), a lambda
            return [Func(f) if (f := self.p.scopes[id(e)]).transparent else UNKNOWN]
        return [Cls(self.p.scopes[id(e)], False) if isinstance(e, ast.ClassDef) else UNKNOWN]

    def bound(self, b: Binding | Ext | Mod) -> list:
        """What a binding (or what an import leads to) can be."""
        if not isinstance(b, Binding):
            return [b]
        if b.kind == "value":
            return self.eval(b.node, b.scope)
        if b.kind == "unpack":  # namespace, op = add_op_namespace_prefix("x").split("::")
            return [PREFIXED if self.value(b.node, b.scope) == PREFIXED else UNKNOWN]
        if b.kind == "import":
            return self._once(("import", id(b)),
                              lambda: [x for t in self.imported(b) for x in self.bound(t)])
        func = b.scope
        if b.kind == "param" and func.method in ("instance", "class") \
                and [*func.node.args.posonlyargs, *func.node.args.args][:1] == [b.node]:
            return [Cls(func.parent, func.method == "instance")]  # self, cls
        if b.kind == "param" and b.extra[0] == "param":
            return [Value("param", slot=(func, b.extra))]
        return [UNKNOWN]

    def imported(self, b: Binding) -> list:
        alias, node = b.node, b.extra
        if isinstance(node, ast.Import):
            first, *rest = (alias.name if alias.asname else alias.name.split(".")[0]).split(".")
            if first != self.p.name:
                return [Ext(".".join([first, *rest]))]
            key = tuple(rest)
            return [Ext(GENERATED)] if self.p.is_generated(key) else \
                [Mod(key)] if key in self.p.packages else []
        key = self.p.from_key(b.scope.module, node)
        if key is None and node.level and "_ops" in (alias.name, (node.module or "")[-4:]):
            key = ("_ops",)  # the generated module, however many dots lead to it
        if key is None:
            return [] if node.level else [Ext(f"{node.module}.{alias.name}")]
        return self.module_member(key, alias.name)

    def module_member(self, key: tuple[str, ...], name: str) -> list:
        """What `from <package module> import name` binds."""
        if key + (name,) in self.p.packages:
            return [Mod(key + (name,))]
        if self.p.is_generated(key + (name,)):
            return [Ext(GENERATED)]
        if self.p.is_generated(key):
            return [Ext(f"{GENERATED}.{name}")]
        module = self.p.modules.get(key)
        return self.p.lookup(module.scope, name) if module else []

    def member(self, base, attr: str) -> list:
        if isinstance(base, Ext):
            return [Ext(f"{base.origin}.{attr}")]
        if isinstance(base, Mod):
            return [x for t in self.module_member(base.key, attr) for x in self.bound(t)]
        if isinstance(base, Cls):
            bound = ("class", "instance") if base.instance else ("class",)  # self, cls
            return [Func(f, int(f.method in bound)) for f in self.methods(base.scope, attr, set())]
        return [UNKNOWN]

    def methods(self, cls: Scope, attr: str, seen: set) -> list[Scope]:
        """The class's (else its bases') defs named `attr` that keep their signature."""
        if id(cls) in seen:
            return []
        seen.add(id(cls))
        if attr in cls.bindings:
            return [f for b in cls.bindings[attr] if isinstance(b.node, FUNCTIONS)
                    and (f := self.p.scopes[id(b.node)]).transparent]
        return [f for base in cls.node.bases for c in self.eval(base, cls.parent)
                if isinstance(c, Cls) for f in self.methods(c.scope, attr, seen)]

    def call(self, call: ast.Call, scope: Scope) -> list:
        """What a call gives: a str method, a package function's return, an instance, ..."""
        if (dotted(call.func) or "").split(".")[-1] == PREFIX_FN or any(
                (isinstance(c, Ext) and c.origin.split(".")[-1] == PREFIX_FN)
                or (isinstance(c, Func) and getattr(c.scope.node, "name", "") == PREFIX_FN)
                for c in self.eval(call.func, scope)):
            return [PREFIXED]
        if isinstance(call.func, ast.Attribute):  # a str method
            receiver, method = self.value(call.func.value, scope), call.func.attr
            if receiver == PREFIXED:
                return [PREFIXED]
            if receiver.kind == "text" and method == "format":
                first = self.value(call.args[0], scope) if call.args else UNKNOWN
                return [fill(receiver, "{", ("}", "0}"), first)]
            seq = call.args[0] if call.args else None
            if method == "join" and receiver.kind == "text" and type(seq) in (ast.List, ast.Tuple):
                parts = [self.value(e, scope) for e in seq.elts]
                return [concat([x for part in parts for x in (receiver, part)][1:])]
        (args, keywords), out = arguments(call, scope), []
        for c in self.eval(call.func, scope):
            if isinstance(c, Func):
                out += self.returned(c, args, keywords)
            elif isinstance(c, Cls):
                out.append(UNKNOWN if c.instance else Cls(c.scope, True))
            elif c == Ext("functools.partial") and args:
                out.append(Partial(tuple(self.eval(*args[0])), tuple(args[1:]), tuple(keywords)))
            else:
                out.append(Ext(c.origin + "()") if isinstance(c, Ext) else UNKNOWN)
        return out

    def returned(self, callee: Func, args: list, keywords: list) -> list:
        """What a package function returns, its parameters replaced by this call's arguments."""
        func, out = callee.scope, []
        for expr in [None] if func.generator or not func.returns else func.returns:
            for x in [UNKNOWN] if expr is None else self.eval(expr, func):
                if isinstance(x, Value) and x.kind == "param" and x.slot[0] is func:
                    x = self.argument(callee, x.slot[1], args, keywords, False)[0]
                out.append(x)
        return out

    def argument(self, callee: Func, slot: tuple, args: list, keywords: list,
                 partial: bool) -> tuple[Value, bool]:
        """The value a call gives a parameter slot (`("param", name)`, `("vararg", i)`,
        `("kwarg", key)`), bound by `inspect.Signature`; True: the parameter's default."""
        P, a = inspect.Parameter, callee.scope.node.args
        pos = [*a.posonlyargs, *a.args]
        defaults = dict(zip(pos[::-1], a.defaults[::-1])) | dict(zip(a.kwonlyargs, a.kw_defaults))
        groups = [(a.posonlyargs, P.POSITIONAL_ONLY), (a.args, P.POSITIONAL_OR_KEYWORD),
                  ([a.vararg], P.VAR_POSITIONAL), (a.kwonlyargs, P.KEYWORD_ONLY),
                  ([a.kwarg], P.VAR_KEYWORD)]
        params = [P(p.arg, kind, default=defaults.get(p) or P.empty)
                  for group, kind in groups for p in group if p]
        del params[:min(callee.offset, len(pos))]  # a bound self / cls
        star = next((i for i, (e, _) in enumerate(args) if isinstance(e, ast.Starred)), len(args))
        unpacked = any(k is None for k, _, _ in keywords)
        try:
            bound = inspect.Signature(params).bind_partial(
                *args[:star], **{k: (e, s) for k, e, s in keywords if k is not None}).arguments
        except (TypeError, ValueError):  # a call that would fail, or a def Python refuses
            return UNKNOWN, False
        kind, key = slot[0], slot[-1]
        if kind == "vararg":
            found = dict(enumerate(bound.get(a.vararg.arg, ()))).get(key)
        elif kind == "kwarg":
            found = bound.get(a.kwarg.arg, {}).get(key)
        elif param := next((p for p in params if p.name == key), None):  # not a bound self / cls
            found = bound.get(key)
            unknown = unpacked or (star < len(args) and param.kind != P.KEYWORD_ONLY)
            if found is None and not unknown and not partial and param.default is not P.empty:
                return self.value(param.default, callee.scope.parent), True
        else:
            return UNKNOWN, False
        return (UNKNOWN if found is None else self.value(*found)), False
