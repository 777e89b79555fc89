"""Python op registrations must use the build's op namespace (a static check with `ast`).

A kernel's ops live in the namespace of its build id (`_<name>_<backend>_<uid>`), which only the
generated `_ops.py` knows. A registration with a hand-written namespace (`"mylib::op"`) would
register into a namespace shared by every build of the kernel: two versions in one process then
clash, and the kernel's own `ops` never sees it. So, like upstream's kernel-builder, a call of
`torch.library.custom_op`, `triton_op`, `register_fake`, `register_kernel`, `register_autograd`,
`register_vmap`, `register_torch_dispatch`, `impl_abstract`, `define` or `impl` must not name its
op with a literal, a `torch.library.Library` must not be given a literal namespace, nor its
`define`/`impl` a literal `ns::op` name.

The check judges where a name comes from, across the package's modules:

- built by `add_op_namespace_prefix(...)` (recognised by name, as upstream does, also through a
  package function that returns it), or an op object / `.name` of `ops`: accepted;
- a literal (a string, an f-string or concatenation whose namespace part is literal, a constant
  bound once to one, `torch.ops.<ns>...`): refused;
- a parameter of a function (a wrapper such as `triton_op(name, ...)` that passes `name` on to
  `custom_op`, also from a nested function, through `*args`/`**kwargs`, a default value or
  `functools.partial`): followed to every call site of the wrapper that can be resolved in the
  package (same module, imports between its modules, methods via `self`/the class/an instance),
  where a literal is refused with that call site's file and line;
- anything else (a variable, an attribute, a call of something outside the package, a
  parameter whose callers are not visible): not decidable statically, so accepted.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import BuildError

QUALIFIED = {"custom_op", "triton_op", "register_fake", "register_kernel", "register_autograd",
             "register_vmap", "register_torch_dispatch", "impl_abstract", "define", "impl"}
LIBRARY_MODULES = ("torch.library", "torch._library.custom_ops", "torch._library.triton")
PREFIX_FN = "add_op_namespace_prefix"
# The parameter that takes the op name, for names forwarded with **kwargs.
NAME_PARAM = {"custom_op": "name", "triton_op": "name", "impl_abstract": "qualname",
              "define": "qualname", "impl": "qualname"}
NAME_KEYWORDS = ("name", "qualname", "op", "ns")
# Decorators that keep a function's signature (so its call sites can be followed).
TRANSPARENT_DECORATORS = {"staticmethod", "classmethod", "wraps", "cache", "lru_cache"}
MAX_DEPTH = 40

REASON_PREFIX = f"the op name is not built by {PREFIX_FN}(...)"
REASON_LIBRARY = ("a literal namespace is shared by every build of the kernel; use the build's "
                  "own (see _ops.py)")
REASON_SCHEMA = "a literal `namespace::op` name; give the op name only (the library has the namespace)"


@dataclass(frozen=True)
class Violation:
    path: Path
    line: int
    call: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.call}: {self.reason}"


def _dotted(node: ast.expr) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def _shown(expr: ast.expr) -> str:
    """How a callee reads in a message."""
    text = _dotted(expr) or ast.unparse(expr)
    return text if len(text) <= 60 else text[:57] + "..."


# --- what an op-name expression is known to be ------------------------------------------------

@dataclass(frozen=True)
class _Value:
    kind: str                 # text | literal | prefixed | param | unknown
    text: str = ""            # text: the string
    ns: bool = False          # literal: its namespace part is literal too
    slot: tuple | None = None  # param: (function, ("param", name) | ("vararg", i) | ("kwarg", key))

    @property
    def is_literal(self) -> bool:
        return self.kind in ("text", "literal")

    @property
    def literal_namespace(self) -> bool:
        if self.kind == "text":
            return "::" in self.text.split("(")[0]
        return self.kind == "literal" and self.ns


UNKNOWN = _Value("unknown")
PREFIXED = _Value("prefixed")


def _concat(values: list[_Value]) -> _Value:
    """The value of string parts glued in order: the namespace is decided by the text up to `::`."""
    text, exact, has_ns = "", True, False
    for v in values:
        if v.kind == "text":
            text += v.text
            has_ns = has_ns or "::" in text or "::" in v.text
        elif v.kind == "literal":
            exact, has_ns = False, has_ns or v.ns
        elif has_ns:
            return _Value("literal", ns=True)  # "mylib::" + anything
        elif text or not exact:
            return UNKNOWN                    # a literal glued before a computed part
        else:
            return v if v.kind in ("prefixed", "param") else UNKNOWN
    return _Value("text", text) if exact else _Value("literal", ns=has_ns)


def _join(values: list[_Value]) -> _Value:
    """The value of one of several alternatives (branches, bindings, returns)."""
    if not values:
        return UNKNOWN
    first = values[0]
    if all(v == first for v in values):
        return first
    if all(v.is_literal for v in values):
        return _Value("literal", ns=all(v.literal_namespace for v in values))
    return UNKNOWN


# --- scopes and bindings ------------------------------------------------------------------------

@dataclass(eq=False)
class _Module:
    key: tuple[str, ...]
    is_package: bool
    shown: Path
    tree: ast.Module
    scope: _Scope | None = None
    attr_values: dict[str, list] = field(default_factory=lambda: defaultdict(list))


@dataclass(eq=False)
class _Scope:
    kind: str  # module | class | function | comprehension
    parent: _Scope | None
    module: _Module
    bindings: dict[str, list[_Binding]] = field(default_factory=lambda: defaultdict(list))
    declared_global: set[str] = field(default_factory=set)
    declared_nonlocal: set[str] = field(default_factory=set)
    star_imports: list[ast.ImportFrom] = field(default_factory=list)
    func: _Func | None = None
    cls: _Class | None = None


@dataclass(eq=False)
class _Binding:
    kind: str  # param | assign | unpack | import | def | class | other
    node: ast.AST | None
    scope: _Scope
    extra: object = None


@dataclass(eq=False)
class _Func:
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
    scope: _Scope
    outer: _Scope
    name: str
    method: str | None  # None | instance | static | class
    transparent: bool
    returns: list[ast.expr | None] = field(default_factory=list)
    generator: bool = False


@dataclass(eq=False)
class _Class:
    node: ast.ClassDef
    scope: _Scope
    outer: _Scope


@dataclass(eq=False)
class _Site:
    """A call (or a decorator applied without a call) in the package."""
    func: ast.expr
    args: list[tuple[ast.expr, _Scope]]
    keywords: list[tuple[str | None, ast.expr, _Scope]]
    scope: _Scope
    line: int
    col: int


# Entities a callee expression can stand for.
@dataclass(frozen=True)
class _Ext:
    origin: str  # a dotted name outside the package, e.g. torch.library.custom_op


@dataclass(frozen=True)
class _Mod:
    key: tuple[str, ...]


@dataclass(frozen=True)
class _Gen:
    what: str  # module (the generated _ops) | ops (its `ops` and what hangs off it)


@dataclass(frozen=True, eq=False)
class _Callable:
    func: _Func
    offset: int  # leading parameters already bound (self, cls)


@dataclass(frozen=True, eq=False)
class _ClassRef:
    cls: _Class


@dataclass(frozen=True, eq=False)
class _Instance:
    cls: _Class


@dataclass(frozen=True)
class _Library:
    method: str | None = None  # a torch.library.Library object, or its define/impl


@dataclass(frozen=True, eq=False)
class _Partial:
    targets: tuple
    args: tuple
    keywords: tuple


@dataclass(frozen=True)
class _Sink:
    kind: str      # qualified | library | schema
    display: str
    name_param: str

    def refuses(self, value: _Value) -> bool:
        if self.kind == "schema":
            return value.literal_namespace
        return value.is_literal

    @property
    def reason(self) -> str:
        return {"qualified": REASON_PREFIX, "library": REASON_LIBRARY, "schema": REASON_SCHEMA}[self.kind]


@dataclass(eq=False)
class _Call:
    """A site that calls a package function (or binds its arguments with functools.partial)."""
    site: _Site
    callee: _Callable
    args: list
    keywords: list
    partial: bool
    display: str


@dataclass(frozen=True)
class _Flow:
    sink: _Sink
    where: str  # file:line of the registration the name reaches


class _Builder:
    """Walks one module: scopes, bindings, functions, classes and call sites."""

    def __init__(self, analysis: _Analysis, module: _Module) -> None:
        self.a = analysis
        self.module = module

    def build(self) -> None:
        scope = _Scope("module", None, self.module)
        self.module.scope = scope
        self._body(self.module.tree.body, scope)

    def _body(self, body: list[ast.AST], scope: _Scope) -> None:
        for node in body:
            self._node(node, scope)

    def _bind(self, scope: _Scope, name: str, binding: _Binding) -> None:
        target = scope
        if scope.kind == "function" and name in scope.declared_global:
            target, binding = self.module.scope, _Binding("other", None, scope)
        elif scope.kind == "function" and name in scope.declared_nonlocal:
            target = scope.parent
            while target and target.kind != "function":
                target = target.parent
            target, binding = target or self.module.scope, _Binding("other", None, scope)
        target.bindings[name].append(binding)

    def _node(self, node: ast.AST, scope: _Scope) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            self._function(node, scope)
        elif isinstance(node, ast.ClassDef):
            self._class(node, scope)
        elif isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            self._comprehension(node, scope)
        elif isinstance(node, ast.Assign):
            self._node(node.value, scope)
            for target in node.targets:
                self._target(target, node.value, scope)
        elif isinstance(node, ast.AnnAssign):
            if node.value is not None:
                self._node(node.value, scope)
                self._target(node.target, node.value, scope)
        elif isinstance(node, ast.NamedExpr):
            self._node(node.value, scope)
            self._bind(scope, node.target.id, _Binding("assign", node.value, scope))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    scope.star_imports.append(node)
                else:
                    local = alias.asname or alias.name.split(".")[0]
                    self._bind(scope, local, _Binding("import", alias, scope, node))
        elif isinstance(node, ast.Global):  # Python puts these before the name's bindings
            scope.declared_global.update(node.names)
        elif isinstance(node, ast.Nonlocal):
            scope.declared_nonlocal.update(node.names)
        elif isinstance(node, ast.Name):
            if not isinstance(node.ctx, ast.Load):
                self._bind(scope, node.id, _Binding("other", None, scope))
        else:
            if isinstance(node, ast.Call):
                self.a.sites.append(_Site(node.func, [(a, scope) for a in node.args],
                                          [(k.arg, k.value, scope) for k in node.keywords],
                                          scope, node.lineno, node.col_offset))
            if isinstance(node, ast.Return) and scope.func is not None:
                scope.func.returns.append(node.value)
            elif isinstance(node, (ast.Yield, ast.YieldFrom)) and scope.func is not None:
                scope.func.generator = True
            for name in _pattern_names(node):
                self._bind(scope, name, _Binding("other", None, scope))
            for child in ast.iter_child_nodes(node):
                self._node(child, scope)

    def _target(self, target: ast.expr, value: ast.expr, scope: _Scope) -> None:
        if isinstance(target, ast.Name):
            self._bind(scope, target.id, _Binding("assign", value, scope))
        elif isinstance(target, (ast.Tuple, ast.List)):
            for elt in target.elts:
                if isinstance(elt, ast.Name):
                    self._bind(scope, elt.id, _Binding("unpack", value, scope))
                else:
                    self._node(elt, scope)
        else:
            if isinstance(target, ast.Attribute) and (dotted := _dotted(target)):
                self.module.attr_values[dotted].append((value, scope))
            self._node(target, scope)

    def _decorators(self, decorators: list[ast.expr], scope: _Scope) -> None:
        for deco in decorators:
            self._node(deco, scope)
            if isinstance(deco, (ast.Name, ast.Attribute)):  # applied as deco(fn)
                self.a.sites.append(_Site(deco, [(ast.Constant(None), scope)], [], scope,
                                          deco.lineno, deco.col_offset))

    def _function(self, node, scope: _Scope) -> None:
        args = node.args
        is_lambda = isinstance(node, ast.Lambda)
        if not is_lambda:
            self._decorators(node.decorator_list, scope)
        for default in [*args.defaults, *args.kw_defaults]:
            if default is not None:
                self._node(default, scope)
        fscope = _Scope("function", scope, self.module)
        deco_names = set() if is_lambda else {(_dotted(d.func if isinstance(d, ast.Call) else d)
                                                or "").split(".")[-1] for d in node.decorator_list}
        method = None
        if scope.kind == "class":
            method = ("static" if "staticmethod" in deco_names else
                      "class" if "classmethod" in deco_names else "instance")
        func = _Func(node, fscope, scope, "<lambda>" if is_lambda else node.name, method,
                     deco_names <= TRANSPARENT_DECORATORS)
        fscope.func = func
        self.a.funcs[id(node)] = func
        if not is_lambda:
            self._bind(scope, node.name, _Binding("def", node, scope))
        for p in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
            fscope.bindings[p.arg].append(_Binding("param", p, fscope, ("param", p.arg)))
        if args.vararg:
            fscope.bindings[args.vararg.arg].append(_Binding("param", args.vararg, fscope, ("varargs",)))
        if args.kwarg:
            fscope.bindings[args.kwarg.arg].append(_Binding("param", args.kwarg, fscope, ("varkw",)))
        if is_lambda:
            func.returns = [node.body]
            self._node(node.body, fscope)
            return
        self._body(node.body, fscope)

    def _class(self, node: ast.ClassDef, scope: _Scope) -> None:
        self._decorators(node.decorator_list, scope)
        for expr in [*node.bases, *(k.value for k in node.keywords)]:
            self._node(expr, scope)
        self._bind(scope, node.name, _Binding("class", node, scope))
        cscope = _Scope("class", scope, self.module)
        cscope.cls = _Class(node, cscope, scope)
        self.a.classes[id(node)] = cscope.cls
        self._body(node.body, cscope)

    def _comprehension(self, node, scope: _Scope) -> None:
        cscope = _Scope("comprehension", scope, self.module)
        for i, gen in enumerate(node.generators):
            self._node(gen.iter, scope if i == 0 else cscope)
            self._node(gen.target, cscope)
            for cond in gen.ifs:
                self._node(cond, cscope)
        for part in (node.key, node.value) if isinstance(node, ast.DictComp) else (node.elt,):
            self._node(part, cscope)


def _pattern_names(node: ast.AST) -> list[str]:
    if isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
        return [node.name]
    if isinstance(node, ast.MatchMapping) and node.rest:
        return [node.rest]
    if isinstance(node, ast.ExceptHandler) and node.name:
        return [node.name]
    return []


# --- the analysis of one package ------------------------------------------------------------------

class _Analysis:
    def __init__(self, package: str, modules: list[_Module]) -> None:
        self.package = package
        self.modules = {m.key: m for m in modules}
        self.packages = {m.key[:i] for m in modules for i in range(len(m.key) + 1)}
        self.sites: list[_Site] = []
        self.funcs: dict[int, _Func] = {}
        self.classes: dict[int, _Class] = {}
        self._resolved: dict[tuple[int, int], list] = {}
        self._values: dict[tuple[int, int], _Value] = {}
        self._active: set[tuple[str, int, int]] = set()
        for module in modules:
            _Builder(self, module).build()
        self.flows: dict[_Func, dict[tuple, _Flow]] = defaultdict(dict)
        self.calls: dict[_Func, list] = defaultdict(list)
        self.found: dict[tuple, Violation] = {}

    # names ------------------------------------------------------------------------------------
    def lookup(self, scope: _Scope, name: str, seen: frozenset = frozenset()) -> list[_Binding]:
        s = scope
        if s.kind == "function" and name in s.declared_global:
            s = scope.module.scope
        while s is not None:
            if name in s.bindings and (s.kind != "class" or s is scope):
                return s.bindings[name]
            if s.parent is None:
                break
            s = s.parent
        for star in s.star_imports if s is not None else ():
            key = self._from_key(s.module, star)
            if key in self.modules and key not in seen:
                found = self.lookup(self.modules[key].scope, name, seen | {s.module.key})
                if found:
                    return found
        return []

    def _from_key(self, module: _Module, node: ast.ImportFrom) -> tuple[str, ...] | None:
        """The package-local module an `from X import ...` names (None: outside the package)."""
        if node.level:
            base = module.key if module.is_package else module.key[:-1]
            up = node.level - 1
            if up > len(base):
                return None
            base = base[:len(base) - up]
            return base + tuple(node.module.split(".")) if node.module else base
        parts = (node.module or "").split(".")
        return tuple(parts[1:]) if parts[0] == self.package else None

    def _is_generated(self, key: tuple[str, ...]) -> bool:
        return bool(key) and key[-1] == "_ops" and key not in self.modules

    # entities ---------------------------------------------------------------------------------
    def resolve(self, expr: ast.expr, scope: _Scope, depth: int = 0) -> list:
        """What a callee expression can stand for (several where a name has several bindings)."""
        memo = (id(expr), id(scope))
        if memo in self._resolved:
            return self._resolved[memo]
        guard = ("r", *memo)
        if depth > MAX_DEPTH or guard in self._active:
            return []
        self._active.add(guard)
        try:
            out = self._resolve(expr, scope, depth + 1)
        finally:
            self._active.discard(guard)
        self._resolved[memo] = out
        return out

    def _resolve(self, expr: ast.expr, scope: _Scope, depth: int) -> list:
        if isinstance(expr, ast.Name):
            return [e for b in self.lookup(scope, expr.id) for e in self._binding_entities(b, depth)]
        if isinstance(expr, ast.Attribute):
            out = [e for base in self.resolve(expr.value, scope, depth)
                   for e in self._member(base, expr.attr, depth)]
            dotted = _dotted(expr)
            for value, vscope in scope.module.attr_values.get(dotted, []) if dotted else ():
                out += [e for e in self.resolve(value, vscope, depth) if isinstance(e, _Library)]
            return out
        if isinstance(expr, ast.Call):
            out = []
            for callee in self.resolve(expr.func, scope, depth):
                if callee == _Ext("functools.partial") and expr.args:
                    out.append(_Partial(tuple(self.resolve(expr.args[0], scope, depth)),
                                        tuple((a, scope) for a in expr.args[1:]),
                                        tuple((k.arg, k.value, scope) for k in expr.keywords)))
                elif callee in (_Ext("torch.library.Library"), _Ext("torch.library.Library.__init__")):
                    out.append(_Library())
                elif isinstance(callee, _ClassRef):
                    out.append(_Instance(callee.cls))
            return out
        if isinstance(expr, ast.Lambda):
            return [_Callable(self.funcs[id(expr)], 0)]
        return []

    def _binding_entities(self, b: _Binding, depth: int) -> list:
        depth += 1
        if depth > MAX_DEPTH:  # e.g. two modules importing a name from each other
            return []
        if b.kind == "assign":
            return self.resolve(b.node, b.scope, depth)
        if b.kind == "def":
            func = self.funcs[id(b.node)]
            return [_Callable(func, 0)] if func.transparent else []
        if b.kind == "class":
            return [_ClassRef(self.classes[id(b.node)])]
        if b.kind == "import":
            return self._import_entities(b, depth)
        if b.kind == "param" and (self_kind := self._self_param(b)):
            func = b.scope.func
            return [_Instance(func.outer.cls) if self_kind == "instance" else _ClassRef(func.outer.cls)]
        return []

    def _self_param(self, b: _Binding) -> str | None:
        func = b.scope.func
        if func is None or func.method not in ("instance", "class") or func.outer.cls is None:
            return None
        params = [*func.node.args.posonlyargs, *func.node.args.args]
        return func.method if params and params[0] is b.node else None

    def _import_entities(self, b: _Binding, depth: int) -> list:
        alias, node = b.node, b.extra
        if isinstance(node, ast.Import):
            target = alias.name if alias.asname else alias.name.split(".")[0]
            parts = target.split(".")
            if parts[0] != self.package:
                return [_Ext(target)]
            key = tuple(parts[1:])
            if self._is_generated(key):
                return [_Gen("module")]
            return [_Mod(key)] if key in self.packages else []
        key = self._import_key(b)
        if key is None:
            return [] if node.level else [_Ext(f"{node.module}.{alias.name}")]
        return self._from_module(key, alias.name, depth)

    def _import_key(self, b: _Binding) -> tuple[str, ...] | None:
        """The package module a `from ... import name` binding reads from (None: outside)."""
        node = b.extra
        key = self._from_key(b.scope.module, node)
        if key is None and node.level and (b.node.name == "_ops" or (node.module or "").endswith("_ops")):
            return ("_ops",)  # the generated module, however many dots lead to it
        return key

    def _from_module(self, key: tuple[str, ...], name: str, depth: int) -> list:
        sub = key + (name,)
        if sub in self.packages:
            return [_Mod(sub)]
        if self._is_generated(sub):
            return [_Gen("module")]
        if self._is_generated(key):
            return [_Gen("ops")] if name == "ops" else [_Ext(f"_ops.{name}")]
        module = self.modules.get(key)
        if module is None:
            return []
        return [e for b in self.lookup(module.scope, name) for e in self._binding_entities(b, depth)]

    def _member(self, base, attr: str, depth: int) -> list:
        if isinstance(base, _Ext):
            return [_Ext(f"{base.origin}.{attr}")]
        if isinstance(base, _Mod):
            return self._from_module(base.key, attr, depth)
        if isinstance(base, _Gen):
            return [_Gen("ops")] if base.what == "ops" or attr == "ops" else [_Ext(f"_ops.{attr}")]
        if isinstance(base, (_ClassRef, _Instance)):
            out = []
            for func in self._class_member(base.cls, attr, set()):
                bound = func.method == "class" or (isinstance(base, _Instance) and func.method == "instance")
                out.append(_Callable(func, 1 if bound else 0))
            return out
        if isinstance(base, _Library) and base.method is None and attr in ("define", "impl"):
            return [_Library(attr)]
        return []

    def _class_member(self, cls: _Class, attr: str, seen: set) -> list[_Func]:
        if id(cls) in seen:
            return []
        seen.add(id(cls))
        found = [self.funcs[id(b.node)] for b in cls.scope.bindings.get(attr, []) if b.kind == "def"]
        if found or attr in cls.scope.bindings:
            return [f for f in found if f.transparent]
        for base in cls.node.bases:
            for ent in self.resolve(base, cls.outer):
                if isinstance(ent, _ClassRef):
                    found += self._class_member(ent.cls, attr, seen)
        return found

    def sink_of(self, ent) -> _Sink | None:
        if isinstance(ent, _Library) and ent.method:
            return _Sink("schema", f"Library.{ent.method}", "schema" if ent.method == "define" else "op_name")
        if not isinstance(ent, _Ext):
            return None
        if ent.origin in ("torch.library.Library", "torch.library.Library.__init__"):
            return _Sink("library", "torch.library.Library", "ns")
        module, _, fn = ent.origin.rpartition(".")
        if module in LIBRARY_MODULES and fn in QUALIFIED:
            return _Sink("qualified", f"torch.library.{fn}", NAME_PARAM.get(fn, "op"))
        return None

    def is_prefix_call(self, call: ast.Call, scope: _Scope) -> bool:
        if (_dotted(call.func) or "").split(".")[-1] == PREFIX_FN:
            return True
        return any((isinstance(e, _Ext) and e.origin.split(".")[-1] == PREFIX_FN)
                   or (isinstance(e, _Callable) and e.func.name == PREFIX_FN)
                   for e in self.resolve(call.func, scope))

    # values -----------------------------------------------------------------------------------
    def evaluate(self, expr: ast.expr, scope: _Scope, depth: int = 0) -> _Value:
        memo = (id(expr), id(scope))
        if memo in self._values:
            return self._values[memo]
        guard = ("v", *memo)
        if depth > MAX_DEPTH or guard in self._active:
            return UNKNOWN
        self._active.add(guard)
        try:
            value = self._evaluate(expr, scope, depth + 1)
        finally:
            self._active.discard(guard)
        self._values[memo] = value
        return value

    def _evaluate(self, expr: ast.expr, scope: _Scope, depth: int) -> _Value:
        ev = lambda e, s=scope: self.evaluate(e, s, depth)  # noqa: E731
        if isinstance(expr, ast.Constant):
            return _Value("text", expr.value) if isinstance(expr.value, str) else UNKNOWN
        if isinstance(expr, ast.JoinedStr):
            return _concat([ev(v) for v in expr.values])
        if isinstance(expr, ast.FormattedValue):
            return ev(expr.value)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            return _concat([ev(expr.left), ev(expr.right)])
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mod):
            return self._percent(expr, scope, depth)
        if isinstance(expr, ast.IfExp):
            return _join([ev(expr.body), ev(expr.orelse)])
        if isinstance(expr, ast.Name):
            return _join([self._binding_value(b, depth) for b in self.lookup(scope, expr.id)])
        if isinstance(expr, ast.Attribute):
            return self._attribute_value(expr, scope, depth)
        if isinstance(expr, ast.Subscript):
            return PREFIXED if ev(expr.value) == PREFIXED else UNKNOWN
        if isinstance(expr, ast.Call):
            return self._call_value(expr, scope, depth)
        return UNKNOWN

    def _percent(self, expr: ast.BinOp, scope: _Scope, depth: int) -> _Value:
        """`"%s::op" % ns`: the text up to the first field, the first value, the text after."""
        template = self.evaluate(expr.left, scope, depth)
        if template.kind != "text":
            return UNKNOWN
        head, sep, rest = template.text.partition("%")
        if "::" in head:
            return _Value("literal", ns=True)
        first = expr.right.elts[0] if isinstance(expr.right, ast.Tuple) and expr.right.elts else expr.right
        if not (sep and rest.startswith("s")):
            return UNKNOWN
        return _concat([_Value("text", head), self.evaluate(first, scope, depth),
                        _Value("text", rest[1:].split("%")[0])])

    def _binding_value(self, b: _Binding, depth: int) -> _Value:
        depth += 1
        if depth > MAX_DEPTH:
            return UNKNOWN
        if b.kind == "param":
            if b.extra[0] != "param" or self._self_param(b):
                return UNKNOWN
            return _Value("param", slot=(b.scope.func, b.extra))
        if b.kind == "assign":
            return self.evaluate(b.node, b.scope, depth)
        if b.kind == "unpack":
            return PREFIXED if self.evaluate(b.node, b.scope, depth) == PREFIXED else UNKNOWN
        if b.kind == "import" and isinstance(b.extra, ast.ImportFrom):
            key, name = self._import_key(b), b.node.name
            if key is not None and self._is_generated(key):
                return PREFIXED if name == "ops" else UNKNOWN
            if key in self.modules:
                found = self.lookup(self.modules[key].scope, name)
                return _join([self._binding_value(x, depth) for x in found])
        return UNKNOWN

    def _attribute_value(self, expr: ast.Attribute, scope: _Scope, depth: int) -> _Value:
        values = []
        for base in self.resolve(expr.value, scope, depth):
            if isinstance(base, _Gen) and (base.what == "ops" or expr.attr == "ops"):
                values.append(PREFIXED)  # an op object of this build, or ops.name
            elif isinstance(base, _Ext) and f"{base.origin}.".startswith("torch.ops."):
                values.append(_Value("literal", ns=True))  # torch.ops.<ns>...
            elif isinstance(base, _Mod) and base.key in self.modules:
                module = self.modules[base.key]
                values.append(_join([self._binding_value(b, depth)
                                     for b in self.lookup(module.scope, expr.attr)]))
            else:
                values.append(UNKNOWN)
        return _join(values)

    def _call_value(self, call: ast.Call, scope: _Scope, depth: int) -> _Value:
        if self.is_prefix_call(call, scope):
            return PREFIXED
        if isinstance(call.func, ast.Attribute):
            receiver = self.evaluate(call.func.value, scope, depth)
            if receiver == PREFIXED:
                return PREFIXED  # a string method on the prefixed name
            if receiver.kind == "text" and call.func.attr == "format":
                head, brace, rest = receiver.text.partition("{")
                if "::" in head:
                    return _Value("literal", ns=True)
                field_, _, tail = rest.partition("}")
                if brace and field_ in ("", "0") and call.args:
                    return _concat([_Value("text", head), self.evaluate(call.args[0], scope, depth),
                                    _Value("text", tail.split("{")[0])])
                return UNKNOWN
            if receiver.kind == "text" and call.func.attr == "join" and call.args \
                    and isinstance(call.args[0], (ast.List, ast.Tuple)):
                parts = []
                for i, elt in enumerate(call.args[0].elts):
                    parts += ([receiver] if i else []) + [self.evaluate(elt, scope, depth)]
                return _concat(parts)
        values = []
        for callee in self.resolve(call.func, scope, depth):
            if isinstance(callee, _Callable):
                values.append(self._return_value(callee, [(a, scope) for a in call.args],
                                                 [(k.arg, k.value, scope) for k in call.keywords], depth))
            else:
                values.append(UNKNOWN)
        return _join(values)

    def _return_value(self, callee: _Callable, args, keywords, depth: int) -> _Value:
        func = callee.func
        values = []
        for expr in [None] if func.generator or not func.returns else func.returns:
            value = UNKNOWN if expr is None else self.evaluate(expr, func.scope, depth)
            if value.kind == "param" and value.slot[0] is func:
                value, _ = self.argument(callee, value.slot[1], args, keywords, False, depth)
            values.append(value)
        return _join(values)

    def argument(self, callee: _Callable, slot: tuple, args, keywords, partial: bool,
                 depth: int = 0) -> tuple[_Value, str]:
        """The value a call gives a parameter slot: (value, arg | default | missing)."""
        missing = (UNKNOWN, "missing")
        a = callee.func.node.args
        positional = [p.arg for p in [*a.posonlyargs, *a.args]]
        posonly = {p.arg for p in a.posonlyargs}
        kwonly = [p.arg for p in a.kwonlyargs]
        defaults = dict(zip(positional[len(positional) - len(a.defaults):], a.defaults))
        defaults.update({p: d for p, d in zip(kwonly, a.kw_defaults) if d is not None})
        positional = positional[callee.offset:]
        starred = next((i for i, (e, _) in enumerate(args) if isinstance(e, ast.Starred)), None)
        unpacked = any(k is None for k, _, _ in keywords)
        named = {k: (e, s) for k, e, s in keywords if k is not None}

        def value(item) -> tuple[_Value, str]:
            return self.evaluate(item[0], item[1], depth), "arg"

        kind, key = slot[0], slot[-1]
        if kind == "vararg":
            index = len(positional) + key
            if starred is not None and starred <= index:
                return UNKNOWN, "unknown"
            return value(args[index]) if index < len(args) else missing
        if kind == "kwarg":
            if key in kwonly or (key in positional and key not in posonly):
                return missing  # it binds to the named parameter
            return value(named[key]) if key in named else (UNKNOWN, "unknown") if unpacked else missing
        if key in positional:
            index = positional.index(key)
            if starred is not None and starred <= index:
                return UNKNOWN, "unknown"
            if index < len(args):
                return value(args[index])
        elif key not in kwonly:
            return UNKNOWN, "unknown"  # a bound self/cls
        if key in named and key not in posonly:
            return value(named[key])
        if unpacked or (starred is not None and key in positional):
            return UNKNOWN, "unknown"
        if partial or key not in defaults:
            return missing
        return self.evaluate(defaults[key], callee.func.outer, depth), "default"

    def sink_name(self, sink: _Sink, args, keywords) -> _Value | None:
        if args:
            expr, scope = args[0]
            if isinstance(expr, ast.Starred):
                return self._forwarded(expr.value, scope, ("varargs",), ("vararg", 0))
            return self.evaluate(expr, scope)
        accepted = {sink.name_param, *(NAME_KEYWORDS if sink.kind == "qualified" else ())}
        for key, expr, scope in keywords:
            if key in accepted:
                return self.evaluate(expr, scope)
        for key, expr, scope in keywords:
            if key is None:
                return self._forwarded(expr, scope, ("varkw",), ("kwarg", sink.name_param))
        return None

    def _forwarded(self, expr: ast.expr, scope: _Scope, param: tuple, slot: tuple) -> _Value:
        """`*args` / `**kwargs` of the enclosing function, passed on to a registration."""
        if isinstance(expr, ast.Name):
            bindings = self.lookup(scope, expr.id)
            if len(bindings) == 1 and bindings[0].kind == "param" and bindings[0].extra == param:
                return _Value("param", slot=(bindings[0].scope.func, slot))
        return UNKNOWN

    # the check --------------------------------------------------------------------------------
    def run(self) -> list[Violation]:
        for site in self.sites:
            callees = self.resolve(site.func, site.scope)
            for ent in callees:
                self._dispatch(site, ent, site.args, site.keywords, False, _shown(site.func))
            if _Ext("functools.partial") in callees and site.args:  # partial(f, name): f's call
                expr, scope = site.args[0]
                for ent in self.resolve(expr, scope):
                    self._dispatch(site, ent, site.args[1:], site.keywords, True, _shown(expr))
        todo = [(func, slot) for func, slots in self.flows.items() for slot in slots]
        while todo:
            func, slot = todo.pop()
            for call in self.calls[func]:
                todo += self._through(call, slot)
        return list(self.found.values())

    def _dispatch(self, site: _Site, ent, args, keywords, partial: bool, display: str) -> None:
        if isinstance(ent, _Partial):
            for target in ent.targets:
                self._dispatch(site, target, [*ent.args, *args], [*ent.keywords, *keywords], partial,
                               display)
            return
        sink = self.sink_of(ent)
        if sink is not None:
            value = self.sink_name(sink, args, keywords)
            if value is not None:
                where = f"{site.scope.module.shown}:{site.line}"
                self._reach(value, _Flow(sink, where), site, sink.display, sink.reason)
        elif isinstance(ent, _ClassRef):  # Class(...) calls its __init__
            for func in self._class_member(ent.cls, "__init__", set()):
                self._dispatch(site, _Callable(func, 1), args, keywords, partial, display)
        elif isinstance(ent, _Callable):
            call = _Call(site, ent, list(args), list(keywords), partial, display)
            self.calls[ent.func].append(call)
            for slot in list(self.flows[ent.func]):
                self._through(call, slot)

    def _through(self, call: _Call, slot: tuple) -> list:
        """A call of a function whose parameter `slot` reaches a registration."""
        flow = self.flows[call.callee.func][slot]
        value, how = self.argument(call.callee, slot, call.args, call.keywords, call.partial)
        if how not in ("arg", "default"):
            return []
        what = f"the default of `{slot[-1]}`, " if how == "default" else ""
        reason = f"{flow.sink.reason} ({what}passed on to {flow.sink.display} at {flow.where})"
        return self._reach(value, flow, call.site, call.display, reason)

    def _reach(self, value: _Value, flow: _Flow, site: _Site, call: str, reason: str) -> list:
        if value.kind == "param":
            func, slot = value.slot
            if slot not in self.flows[func]:
                self.flows[func][slot] = flow
                return [(func, slot)]
        elif flow.sink.refuses(value):
            path = site.scope.module.shown
            self.found.setdefault((path, site.line, site.col, call),
                                  Violation(path, site.line, call, reason))
        return []


def _module_key(rel: str) -> tuple[tuple[str, ...], bool]:
    parts = Path(rel).with_suffix("").parts
    if parts and parts[-1] == "__init__":
        return tuple(parts[:-1]), True
    return tuple(parts), False


def check_modules(package: str, files: list[tuple[Path, str, Path]]) -> list[Violation]:
    """Violations in a package's Python files: (source, path in the package, path shown)."""
    modules, found = [], []
    for src, rel, shown in files:
        try:
            tree = ast.parse(src.read_bytes(), filename=str(shown))
        except SyntaxError as e:
            found.append(Violation(shown, e.lineno or 0, "syntax", f"not valid Python: {e.msg}"))
            continue
        key, is_package = _module_key(rel)
        modules.append(_Module(key, is_package, shown, tree))
    found += _Analysis(package, modules).run()
    order = {shown: i for i, (_, _, shown) in enumerate(files)}
    return sorted(found, key=lambda v: (order[v.path], v.line))


def check_file(path: Path, shown: Path | None = None) -> list[Violation]:
    """Violations in one module, as a package of its own."""
    return check_modules(path.parent.name, [(path, path.name, shown or path)])


def check_package(files: list[tuple[Path, str]], project: Path) -> None:
    """Raises one BuildError listing every violation in the package's Python files."""
    sources = []
    for src, rel in files:
        if src.suffix != ".py":
            continue
        try:
            shown = src.relative_to(project)
        except ValueError:
            shown = src
        sources.append((src, rel, shown))
    if not sources:
        return
    src, rel, _ = sources[0]
    package = src.parents[len(Path(rel).parts) - 1].name
    found = check_modules(package, sources)
    if not found:
        return
    first = found[0]
    more = "".join(f"\n    {v}" for v in found[1:])
    raise BuildError(f"{first.call}: {first.reason}{more}", file=f"{project / first.path}:{first.line}",
                     hint=f'name ops with {PREFIX_FN}("my_op"), imported from ._ops')
