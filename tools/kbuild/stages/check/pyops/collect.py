"""Pass 1: a package's modules as plain tables of what each name is bound to.

Per scope (module, class, def or lambda, comprehension), `bindings` maps a name to its
`Binding`s: `value` (an assignment's value, a def, a class), `unpack` (a name of a tuple
target), `import`, `param`, or `other` (a loop or `with` target, a name rebound through
`global` or `nonlocal`, ...: never followed). A function also lists what it returns; the package
lists every call (a decorator applied without a call is one too), a module its `x.attr = value`.
"""

from __future__ import annotations

import ast
from collections import defaultdict, namedtuple
from dataclasses import dataclass, field
from pathlib import Path

# Decorators that keep a function's signature, so its calls can be followed.
TRANSPARENT = {"staticmethod", "classmethod", "wraps", "cache", "lru_cache"}
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)
NAMED = (ast.ExceptHandler, ast.MatchAs, ast.MatchStar, ast.MatchMapping)  # `as name`, `**rest`


@dataclass(eq=False)
class Module:
    key: tuple[str, ...]  # its path in the package: ("utils", "library")
    is_package: bool      # an __init__.py
    shown: Path           # how messages name its file
    tree: ast.Module
    scope: Scope | None = None
    attrs: dict = field(default_factory=lambda: defaultdict(list))  # "self.lib": [(value, scope)]


@dataclass(eq=False)
class Scope:
    kind: str                    # module | class | function | comprehension
    parent: Scope | None
    module: Module
    node: ast.AST | None = None  # the def, lambda or class
    method: str | None = None    # a def in a class: instance | class | static
    transparent: bool = True     # no decorator that may change its signature
    bindings: dict = field(default_factory=lambda: defaultdict(list))  # name: [Binding]
    declared: dict = field(default_factory=dict)  # name: global | nonlocal
    stars: list = field(default_factory=list)     # its `from ... import *`
    returns: list = field(default_factory=list)   # expressions (None: a bare `return`)
    generator: bool = False


# kind: value | unpack | import | param | other; node: the value (evaluated in `scope`), def,
# class, alias or parameter; extra: an import's Import / ImportFrom, a parameter's slot.
Binding = namedtuple("Binding", "kind node scope extra", defaults=(None,))


def dotted(node: ast.expr) -> str | None:
    """`a.b.c` as text (None: not a dotted name)."""
    if isinstance(node, ast.Attribute):
        return (base := dotted(node.value)) and f"{base}.{node.attr}"
    return node.id if isinstance(node, ast.Name) else None


class Package:
    def __init__(self, name: str, modules: list[Module]) -> None:
        self.name, self.modules = name, {m.key: m for m in modules}
        self.packages = {m.key[:i] for m in modules for i in range(len(m.key) + 1)}
        self.calls: list[tuple[ast.Call, Scope]] = []
        self.scopes: dict[int, Scope] = {}  # id(def, lambda or class node): its scope
        for module in modules:
            module.scope = Scope("module", None, module)
            self.walk(module.tree.body, module.scope)

    def lookup(self, scope: Scope, name: str, seen: frozenset = frozenset()) -> list[Binding]:
        """The scope, the enclosing functions (never a class body), the module, its `import *`."""
        s = scope.module.scope if scope.declared.get(name) == "global" else scope
        while name not in s.bindings or (s.kind == "class" and s is not scope):
            if s.parent is None:
                keys = [self.from_key(s.module, star) for star in s.stars]
                return next((found for key in keys if key in self.modules and key not in seen
                             and (found := self.lookup(self.modules[key].scope, name,
                                                       seen | {s.module.key}))), [])
            s = s.parent
        return s.bindings[name]

    def from_key(self, module: Module, node: ast.ImportFrom) -> tuple[str, ...] | None:
        """The package module `from X import ...` names (None: outside the package)."""
        if not node.level:
            parts = (node.module or "").split(".")
            return tuple(parts[1:]) if parts[0] == self.name else None
        base = module.key if module.is_package else module.key[:-1]
        if node.level - 1 > len(base):
            return None
        base = base[:len(base) - (node.level - 1)]
        return base + tuple(node.module.split(".")) if node.module else base

    def walk(self, nodes, scope: Scope) -> None:
        for node in nodes:
            self.visit(node, scope)

    def bind(self, scope: Scope, name: str, kind: str, node=None, extra=None) -> None:
        if how := scope.declared.get(name) if scope.kind == "function" else None:
            kind, node = "other", None  # rebound from a function through global / nonlocal
            scope = scope.module.scope if how == "global" else scope.parent
            while scope.kind != "function" and scope.parent is not None:
                scope = scope.parent
        scope.bindings[name].append(Binding(kind, node, scope, extra))

    def visit(self, node: ast.AST, scope: Scope) -> None:
        if isinstance(node, FUNCTIONS):
            self.function(node, scope)
        elif isinstance(node, ast.ClassDef):
            self.decorators(node.decorator_list, scope)
            self.walk([*node.bases, *(k.value for k in node.keywords)], scope)
            self.bind(scope, node.name, "value", node)
            self.scopes[id(node)] = inner = Scope("class", scope, scope.module, node)
            self.walk(node.body, inner)
        elif isinstance(node, COMPREHENSIONS):
            inner = Scope("comprehension", scope, scope.module)
            for i, gen in enumerate(node.generators):  # the first iterable is evaluated outside
                self.visit(gen.iter, scope if i == 0 else inner)
                self.walk([gen.target, *gen.ifs], inner)
            self.walk([getattr(node, f) for f in ("key", "value", "elt") if hasattr(node, f)],
                      inner)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)):
            if node.value is not None:
                self.visit(node.value, scope)
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    self.target(target, node.value, scope)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    scope.stars.append(node)
                else:
                    self.bind(scope, alias.asname or alias.name.split(".")[0], "import", alias,
                              node)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            how = "global" if isinstance(node, ast.Global) else "nonlocal"
            scope.declared.update(dict.fromkeys(node.names, how))
        elif isinstance(node, ast.Name):
            if not isinstance(node.ctx, ast.Load):
                self.bind(scope, node.id, "other")
        else:
            if isinstance(node, ast.Call):
                self.calls.append((node, scope))
            elif isinstance(node, ast.Return) and scope.kind == "function":
                scope.returns.append(node.value)
            elif isinstance(node, (ast.Yield, ast.YieldFrom)) and scope.kind == "function":
                scope.generator = True
            elif isinstance(node, NAMED) \
                    and (name := getattr(node, "rest", None) or getattr(node, "name", None)):
                self.bind(scope, name, "other")
            self.walk(ast.iter_child_nodes(node), scope)

    def target(self, target: ast.expr, value: ast.expr, scope: Scope) -> None:
        if isinstance(target, ast.Name):
            self.bind(scope, target.id, "value", value)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for elt in target.elts:
                if isinstance(elt, ast.Name):
                    self.bind(scope, elt.id, "unpack", value)
                else:
                    self.visit(elt, scope)
        else:
            if isinstance(target, ast.Attribute) and (name := dotted(target)):
                scope.module.attrs[name].append((value, scope))
            self.visit(target, scope)

    def decorators(self, decorators: list[ast.expr], scope: Scope) -> None:
        for deco in decorators:
            self.visit(deco, scope)
            if isinstance(deco, (ast.Name, ast.Attribute)):  # applied as deco(fn): a call too
                self.calls.append((ast.copy_location(ast.Call(deco, [ast.Constant(None)], []),
                                                     deco), scope))

    def function(self, node: ast.AST, scope: Scope) -> None:  # a def or a lambda
        args, decorators = node.args, getattr(node, "decorator_list", [])
        self.decorators(decorators, scope)
        self.walk([d for d in [*args.defaults, *args.kw_defaults] if d is not None], scope)
        names = {(dotted(getattr(d, "func", d)) or "").split(".")[-1] for d in decorators}
        method = None if scope.kind != "class" else "static" if "staticmethod" in names \
            else "class" if "classmethod" in names else "instance"
        self.scopes[id(node)] = inner = Scope("function", scope, scope.module, node, method,
                                              names <= TRANSPARENT)
        if not isinstance(node, ast.Lambda):
            self.bind(scope, node.name, "value", node)
        for p in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
            inner.bindings[p.arg].append(Binding("param", p, inner, ("param", p.arg)))
        for p, kind in ((args.vararg, "vararg"), (args.kwarg, "kwarg")):
            if p is not None:
                inner.bindings[p.arg].append(Binding("param", p, inner, (kind,)))
        if isinstance(node, ast.Lambda):
            inner.returns.append(node.body)
        self.walk([node.body] if isinstance(node, ast.Lambda) else node.body, inner)
