"""Pass 2: what an expression can be, and each registration's op name judged where it is given.

`Eval.eval` lists what an expression can be: an op name as the rule sees it (`Value`), a name
from outside the package (`Ext`: `torch.library.custom_op`; `torch.library.Library()`, what
calling one gives; `<_ops>.ops.name`, the generated module), a package module (`Mod`), function
(`Func`, `offset` parameters bound: self, cls), class or instance (`Cls`), a `functools.partial`.
Names follow their bindings (collect.py) and imports; a package function's call is what it
returns, its parameters replaced by the call's arguments. A question asked again while open, or
nested too deep, is unknown. `Eval.run` judges the name each registration is given; a name that
is a parameter of a package function is judged at every call of that function instead.
"""

from __future__ import annotations

import ast
import inspect
import re
from collections import defaultdict, namedtuple

from .collect import FUNCTIONS, Binding, Package, Scope, dotted

PREFIX_FN = "add_op_namespace_prefix"  # recognised by name, as upstream does
GENERATED = "<_ops>"                   # the build's `_ops` module, written at build time
MAX_OPEN = 60                          # questions open at once before one is answered unknown

# kind: text (`text` exact) | literal (built from literals only) | prefixed (by PREFIX_FN, or the
# generated `ops`) | param (`slot`: (function scope, slot)) | unknown; `ns`: a literal namespace.
Value = namedtuple("Value", "kind text ns slot", defaults=("", False, None))
Ext, Mod = namedtuple("Ext", "origin"), namedtuple("Mod", "key")
Func, Cls = namedtuple("Func", "scope offset", defaults=(0,)), namedtuple("Cls", "scope instance")
Partial = namedtuple("Partial", "targets args keywords")
UNKNOWN, PREFIXED, LITERAL_NS = Value("unknown"), Value("prefixed"), Value("literal", ns=True)
PARTIAL, LIBRARY = Ext("functools.partial"), Ext("torch.library.Library()")


def text(s: str) -> Value:
    return Value("text", s, "::" in s.split("(")[0])


def as_name(x) -> Value:
    """Anything an expression can be, as an op name."""
    if isinstance(x, Value):
        return x
    origin = x.origin if isinstance(x, Ext) else ""
    return PREFIXED if origin.startswith(GENERATED + ".ops") else \
        LITERAL_NS if origin.startswith("torch.ops.") else UNKNOWN


def concat(values: list[Value]) -> Value:
    """String parts glued in order: the namespace is decided by the text up to `::`."""
    s, exact, has_ns = "", True, False
    for v in values:
        if v.kind in ("text", "literal"):
            s, exact = (s + v.text, exact) if v.kind == "text" else (s, False)
            has_ns = has_ns or "::" in s or v.ns
        elif has_ns:
            return LITERAL_NS          # "mylib::" + anything
        else:                          # name + "::op" is as name is; "a" + name is not decidable
            return v if not s and exact and v.kind in ("prefixed", "param") else UNKNOWN
    return text(s) if exact else Value("literal", ns=has_ns)


def join(values: list[Value]) -> Value:
    """One of several alternatives (branches, bindings, returns)."""
    if values and all(v == values[0] for v in values):
        return values[0]
    if values and all(v.kind in ("text", "literal") for v in values):
        return Value("literal", ns=all(v.ns for v in values))
    return UNKNOWN


def fill(template: Value, field: str, values: list[Value]) -> Value:
    """A `%` or `.format` template, its `%s`, `{}` and `{N}` fields filled (others: unknown)."""
    if template.kind != "text":
        return UNKNOWN
    pieces, given = re.split(f"({field})", template.text), iter(values)
    return concat([text(p) if n % 2 == 0 else next(given, UNKNOWN) if p in ("%s", "{}")
                   else values[int(p[1:-1])] if p[1:-1].isdigit() and int(p[1:-1]) < len(values)
                   else UNKNOWN for n, p in enumerate(pieces)])


def arguments(call: ast.Call, scope: Scope) -> tuple[list, list]:
    """A call's arguments as [(expr, scope)] and [(keyword, expr, scope)]."""
    return [(a, scope) for a in call.args], [(k.arg, k.value, scope) for k in call.keywords]


def shown(expr: ast.expr) -> str:
    text = dotted(expr) or ast.unparse(expr)
    return text if len(text) <= 60 else text[:57] + "..."


class Eval:
    def __init__(self, package: Package, sink_of) -> None:
        self.p, self.sink_of, self.memo, self.open = package, sink_of, {}, set()
        self.callers: dict = defaultdict(list)  # function scope: [(site, Func, args, keywords)]
        self.followed: set = set()              # (function scope, slot) followed to its callers
        self.found: dict = {}                   # (path, line, column, call): (path, line, ...)

    def run(self) -> list[tuple]:
        """The refused names: (path, line, call as shown, reason)."""
        sites = []  # (site: (call, scope, callee as shown, by a partial), callee, args, keywords)
        for node, scope in self.p.calls:
            (args, keywords), callees = arguments(node, scope), self.eval(node.func, scope)
            for callee in callees:
                self.expand(sites, (node, scope, shown(node.func), False), callee, args, keywords)
            if PARTIAL in callees and args:  # partial(f, name): a call of f
                for callee in self.eval(*args[0]):
                    site = (node, scope, shown(args[0][0]), True)
                    self.expand(sites, site, callee, args[1:], keywords)
        for call in sites:
            if isinstance(call[1], Func):
                self.callers[call[1].scope].append(call)
        for (node, scope, _, partial), callee, args, keywords in sites:
            if (sink := self.sink_of(callee)) and (value := self.name(sink, args, keywords)):
                where = f"{scope.module.shown}:{node.lineno}"
                self.reach(value, sink, where, (node, scope, sink.display, partial), sink.reason)
        return list(self.found.values())

    def expand(self, sites: list, site: tuple, callee, args: list, keywords: list) -> None:
        """A call as the calls it makes: a partial's target, a class's `__init__`."""
        if isinstance(callee, Partial):
            for target in callee.targets:
                self.expand(sites, site, target, [*callee.args, *args],
                            [*callee.keywords, *keywords])
        elif isinstance(callee, Cls) and not callee.instance:
            sites += [(site, Func(f, 1), args, keywords)
                      for f in self.methods(callee.scope, "__init__", set())]
        else:
            sites.append((site, callee, args, keywords))

    def name(self, sink, args: list, keywords: list) -> Value | None:
        """The op name a registration is given (None: none)."""
        if args and isinstance(args[0][0], ast.Starred):
            return self.forwarded(args[0][0].value, args[0][1], ("vararg", 0))
        if args:
            return self.value(*args[0])
        for key, expr, scope in keywords:
            if key == sink.param or key in sink.keywords:
                return self.value(expr, scope)
        return next((self.forwarded(expr, scope, ("kwarg", sink.param))
                     for key, expr, scope in keywords if key is None), None)

    def forwarded(self, expr: ast.expr, scope: Scope, slot: tuple) -> Value | None:
        """The enclosing function's `*args` / `**kwargs`, handed on to a registration."""
        bindings = self.p.lookup(scope, expr.id) if isinstance(expr, ast.Name) else []
        if len(bindings) == 1 and bindings[0].kind == "param" and bindings[0].extra == slot[:1]:
            return Value("param", slot=(bindings[0].scope, slot))
        return None

    def reach(self, value: Value, sink, where: str, site: tuple, reason: str) -> None:
        """A name reaches a registration from a call site: a literal is refused there, a
        parameter followed to its function's calls (once: the first registration it reaches)."""
        if value.kind != "param":
            node, scope, display, _ = site
            if sink.refuses(value):
                key = (path := scope.module.shown, node.lineno, node.col_offset, display)
                self.found.setdefault(key, (path, node.lineno, display, reason))
        elif value.slot not in self.followed:
            self.followed.add(value.slot)
            for (node, scope, display, partial), callee, args, keywords in \
                    self.callers[value.slot[0]]:
                arg, default = self.argument(callee, value.slot[1], args, keywords, partial)
                what = f"the default of `{value.slot[1][-1]}`, " if default else ""
                self.reach(arg, sink, where, (node, scope, display, partial),
                           f"{sink.reason} ({what}passed on to {sink.display} at {where})")

    def value(self, expr: ast.expr, scope: Scope) -> Value:
        """`expr` as an op name: its alternatives joined."""
        return join([as_name(x) for x in self.eval(expr, scope)])

    def once(self, key: tuple, compute) -> list:
        """compute() memoised; a question asked again while open, or too deep, is unknown."""
        if key not in self.memo:
            if key in self.open or len(self.open) > MAX_OPEN:
                return [UNKNOWN]
            self.open.add(key)
            try:
                self.memo[key] = compute() or [UNKNOWN]
            finally:
                self.open.discard(key)
        return self.memo[key]

    def eval(self, expr: ast.AST, scope: Scope) -> list:
        return self.once((id(expr), id(scope)), lambda: self._eval(expr, scope))

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
            fields = e.right.elts if isinstance(e.right, ast.Tuple) else [e.right]
            return [fill(v(e.left), "%.", [v(f) for f in fields])]
        if isinstance(e, ast.IfExp):
            return self.eval(e.body, scope) + self.eval(e.orelse, scope)
        if isinstance(e, ast.Subscript):  # add_op_namespace_prefix("x").split("::")[0]
            return [PREFIXED if v(e.value) == PREFIXED else UNKNOWN]
        if isinstance(e, ast.Name):
            return [x for b in self.p.lookup(scope, e.id) for x in self.bound(b)]
        if isinstance(e, ast.Attribute):
            out = [x for base in self.eval(e.value, scope) for x in self.member(base, e.attr)]
            for value, where in scope.module.attrs.get(dotted(e), []):  # self.lib = Library()
                out += [x for x in self.eval(value, where) if x == LIBRARY]
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
            return self.once((id(b),), lambda: [x for t in self.imported(b) for x in self.bound(t)])
        func = b.scope
        if b.kind == "param" and func.method in ("instance", "class") \
                and [*func.node.args.posonlyargs, *func.node.args.args][:1] == [b.node]:
            return [Cls(func.parent, func.method == "instance")]  # self, cls
        return [Value("param", slot=(func, b.extra)) if b.kind == "param" and b.extra[0] == "param"
                else UNKNOWN]

    def imported(self, b: Binding) -> list:
        alias, node = b.node, b.extra
        if isinstance(node, ast.Import):
            first, *rest = (alias.name if alias.asname else alias.name.split(".")[0]).split(".")
            if first != self.p.name:
                return [Ext(".".join([first, *rest]))]
            return self.module_member(tuple(rest[:-1]), rest[-1]) if rest else [Mod(())]
        key = self.p.from_key(b.scope.module, node)
        if key is None and node.level and "_ops" in (alias.name, (node.module or "")[-4:]):
            key = ("_ops",)  # the generated module, however many dots lead to it
        if key is None:
            return [] if node.level else [Ext(f"{node.module}.{alias.name}")]
        return self.module_member(key, alias.name)

    def module_member(self, key: tuple[str, ...], name: str) -> list:
        """What `from <package module> import name` binds (`_ops`: the generated module)."""
        if key + (name,) in self.p.packages:
            return [Mod(key + (name,))]
        if name == "_ops":
            return [Ext(GENERATED)]
        if key[-1:] == ("_ops",) and key not in self.p.modules:
            return [Ext(f"{GENERATED}.{name}")]
        return self.p.lookup(self.p.modules[key].scope, name) if key in self.p.modules else []

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
        callees = self.eval(call.func, scope)
        if PREFIX_FN in [(dotted(call.func) or "").split(".")[-1]] + [
                c.origin.split(".")[-1] if isinstance(c, Ext) else getattr(c.scope.node, "name", "")
                for c in callees if isinstance(c, (Ext, Func))]:
            return [PREFIXED]
        if isinstance(call.func, ast.Attribute):  # a str method
            receiver, method = self.value(call.func.value, scope), call.func.attr
            seq = call.args[0] if call.args else None
            if receiver == PREFIXED or method == "format":
                return [receiver if receiver == PREFIXED else
                        fill(receiver, r"\{[^{}]*\}", [self.value(a, scope) for a in call.args])]
            if method == "join" and receiver.kind == "text" and type(seq) in (ast.List, ast.Tuple):
                parts = [self.value(e, scope) for e in seq.elts]
                return [concat([x for part in parts for x in (receiver, part)][1:])]
        (args, keywords), out = arguments(call, scope), []
        for c in callees:
            if isinstance(c, Func):
                out += self.returned(c, args, keywords)
            elif isinstance(c, Cls):
                out.append(UNKNOWN if c.instance else Cls(c.scope, True))
            elif c == PARTIAL and args:
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
            unknown = any(k is None for k, _, _ in keywords) \
                or (star < len(args) and param.kind != P.KEYWORD_ONLY)
            if found is None and not unknown and not partial and param.default is not P.empty:
                return self.value(param.default, callee.scope.parent), True
        else:
            return UNKNOWN, False
        return (UNKNOWN if found is None else self.value(*found)), False
