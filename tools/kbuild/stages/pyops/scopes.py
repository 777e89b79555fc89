"""A package's modules as scopes: what each name is bound to, by Python's scoping rules.

One walk of each module's `ast` records, per scope (module, class, function or lambda,
comprehension), every binding of a name: a value (an assignment's, or the def or class itself),
an unpacked value, an import, a parameter, or `other` (a loop or `with` target, a name rebound
through `global`, ...: not followed). It also records every call (a decorator applied without a
call is one too) and what each function returns. `Package.lookup` finds a name as Python does:
the scope, the enclosing functions (never a class body), the module, its `from x import *`.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

# Decorators that keep a function's signature, so its call sites can be followed.
TRANSPARENT_DECORATORS = {"staticmethod", "classmethod", "wraps", "cache", "lru_cache"}
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


@dataclass(eq=False)
class Module:
    key: tuple[str, ...]      # its path in the package: ("utils", "library")
    is_package: bool          # an __init__.py
    shown: Path               # how messages name its file
    tree: ast.Module
    scope: Scope | None = None
    attr_values: dict = field(default_factory=lambda: defaultdict(list))  # "self.lib": [(value, scope)]


@dataclass(eq=False)
class Scope:
    kind: str                 # module | class | function | comprehension
    parent: Scope | None
    module: Module
    node: ast.AST | None = None                     # the def, lambda or class
    bindings: dict = field(default_factory=lambda: defaultdict(list))  # name: [Binding]
    declared: dict[str, str] = field(default_factory=dict)            # name: global | nonlocal
    star_imports: list[ast.ImportFrom] = field(default_factory=list)
    method: str | None = None                       # a def in a class: instance | class | static
    transparent: bool = True                        # no decorator that may change its signature
    returns: list[ast.expr | None] = field(default_factory=list)
    generator: bool = False


@dataclass(eq=False)
class Binding:
    kind: str                 # value | unpack | import | param | other
    node: ast.AST | None      # the value (evaluated in `scope`), def, class, alias or parameter
    scope: Scope
    extra: object = None      # import: its Import/ImportFrom; param: its slot


def dotted(node: ast.expr) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None


class Package:
    def __init__(self, name: str, modules: list[Module]) -> None:
        self.name = name
        self.modules = {m.key: m for m in modules}
        self.packages = {m.key[:i] for m in modules for i in range(len(m.key) + 1)}
        self.calls: list[tuple[ast.Call, Scope]] = []
        self.scopes: dict[int, Scope] = {}  # id(def, lambda or class node): its scope
        for module in modules:
            module.scope = Scope("module", None, module)
            _Walker(self, module).body(module.tree.body, module.scope)

    def lookup(self, scope: Scope, name: str, seen: frozenset = frozenset()) -> list[Binding]:
        s = scope.module.scope if scope.declared.get(name) == "global" else scope
        while True:
            if name in s.bindings and (s.kind != "class" or s is scope):
                return s.bindings[name]
            if s.parent is None:
                break
            s = s.parent
        for star in s.star_imports:
            key = self.from_key(s.module, star)
            if key in self.modules and key not in seen:
                if found := self.lookup(self.modules[key].scope, name, seen | {s.module.key}):
                    return found
        return []

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

    def is_generated(self, key: tuple[str, ...]) -> bool:
        """The build's `_ops` module, written at build time (so not among the files)."""
        return bool(key) and key[-1] == "_ops" and key not in self.modules


class _Walker:
    def __init__(self, package: Package, module: Module) -> None:
        self.package, self.module = package, module

    def body(self, nodes: list[ast.AST], scope: Scope) -> None:
        for node in nodes:
            self.visit(node, scope)

    def bind(self, scope: Scope, name: str, kind: str, node: ast.AST | None = None, extra=None) -> None:
        how = scope.declared.get(name) if scope.kind == "function" else None
        if how:  # rebound from a function through global / nonlocal: not followed
            kind, node, scope = "other", None, self.module.scope if how == "global" else scope.parent
            while scope.kind != "function" and scope.parent is not None:
                scope = scope.parent
        scope.bindings[name].append(Binding(kind, node, scope, extra))

    def visit(self, node: ast.AST, scope: Scope) -> None:
        if isinstance(node, FUNCTIONS):
            self.function(node, scope)
        elif isinstance(node, ast.ClassDef):
            self.decorators(node.decorator_list, scope)
            self.body([*node.bases, *(k.value for k in node.keywords)], scope)
            self.bind(scope, node.name, "value", node)
            self.package.scopes[id(node)] = cscope = Scope("class", scope, self.module, node)
            self.body(node.body, cscope)
        elif isinstance(node, COMPREHENSIONS):
            cscope = Scope("comprehension", scope, self.module)
            for i, gen in enumerate(node.generators):  # the first iterable is evaluated outside
                self.visit(gen.iter, scope if i == 0 else cscope)
                self.body([gen.target, *gen.ifs], cscope)
            self.body([node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt], cscope)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)):
            if node.value is not None:
                self.visit(node.value, scope)
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    self.target(target, node.value, scope)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    scope.star_imports.append(node)
                else:
                    self.bind(scope, alias.asname or alias.name.split(".")[0], "import", alias, node)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            scope.declared.update(dict.fromkeys(node.names, "global" if isinstance(node, ast.Global) else "nonlocal"))
        elif isinstance(node, ast.Name):
            if not isinstance(node.ctx, ast.Load):
                self.bind(scope, node.id, "other")
        else:
            if isinstance(node, ast.Call):
                self.package.calls.append((node, scope))
            elif isinstance(node, ast.Return) and scope.kind == "function":
                scope.returns.append(node.value)
            elif isinstance(node, (ast.Yield, ast.YieldFrom)) and scope.kind == "function":
                scope.generator = True
            elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar, ast.MatchMapping)):
                if name := getattr(node, "rest", None) or getattr(node, "name", None):
                    self.bind(scope, name, "other")
            self.body(list(ast.iter_child_nodes(node)), scope)

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
                self.module.attr_values[name].append((value, scope))
            self.visit(target, scope)

    def decorators(self, decorators: list[ast.expr], scope: Scope) -> None:
        for deco in decorators:
            self.visit(deco, scope)
            if isinstance(deco, (ast.Name, ast.Attribute)):  # applied as deco(fn): a call too
                call = ast.copy_location(ast.Call(deco, [ast.Constant(None)], []), deco)
                self.package.calls.append((call, scope))

    def function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, scope: Scope) -> None:
        args, decorators = node.args, getattr(node, "decorator_list", [])
        self.decorators(decorators, scope)
        self.body([d for d in [*args.defaults, *args.kw_defaults] if d is not None], scope)
        names = {(dotted(d.func if isinstance(d, ast.Call) else d) or "").split(".")[-1] for d in decorators}
        method = None
        if scope.kind == "class":
            method = "static" if "staticmethod" in names else "class" if "classmethod" in names else "instance"
        fscope = Scope("function", scope, self.module, node, method=method,
                       transparent=names <= TRANSPARENT_DECORATORS)
        self.package.scopes[id(node)] = fscope
        if not isinstance(node, ast.Lambda):
            self.bind(scope, node.name, "value", node)
        for p in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
            fscope.bindings[p.arg].append(Binding("param", p, fscope, ("param", p.arg)))
        for p, slot in ((args.vararg, "varargs"), (args.kwarg, "varkw")):
            if p is not None:
                fscope.bindings[p.arg].append(Binding("param", p, fscope, (slot,)))
        if isinstance(node, ast.Lambda):
            fscope.returns.append(node.body)
            self.visit(node.body, fscope)
        else:
            self.body(node.body, fscope)
