"""Python op registrations must use the build's op namespace (a static check with `ast`).

A kernel's ops live in the namespace of its build id (`_<name>_<backend>_<uid>`), which only the
generated `_ops.py` knows. A registration with a hand-written namespace (`"mylib::op"`) would
register into a namespace shared by every build of the kernel: two versions in one process then
clash, and the kernel's own `ops` never sees it. The rule, as upstream kernel-builder has it:

- the registrations of `SINKS` (`torch.library.custom_op`, `register_fake`, `define`, ...) must
  not name their op with a literal;
- `torch.library.Library(ns, ...)` must not be given a literal namespace, nor its `define`/`impl`
  a literal `ns::op` name.

Where a name comes from decides (names.py):
- built by `add_op_namespace_prefix(...)` (by name, also through a package function that returns
  it) or an op / `.name` of the generated `ops`: accepted;
- a literal (a string, an f-string, `+`, `%`, `.format` or `.join` whose namespace part is
  literal, a constant bound once, `torch.ops.<ns>...`): refused;
- a parameter of a package function (a wrapper such as `triton_op(name, ...)` that hands `name`
  on): judged at every call of that function in the package (through imports, methods, classes,
  `*args`/`**kwargs`, defaults, `functools.partial`), where a literal is refused with that
  call's file and line;
- anything else (a variable, an attribute, a call of something outside the package, a parameter
  whose callers are not in the package): not decidable statically, so accepted.

scopes.py finds what names are bound to, resolve.py what an expression can be; this module
applies the rule at every call and follows parameters to their callers.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from ...core.errors import BuildError
from .names import PREFIX_FN, Ext, Value
from .resolve import Cls, Func, Partial, Resolver
from .scopes import Module, Package, Scope, dotted

LIBRARY_MODULES = ("torch.library", "torch._library.custom_ops", "torch._library.triton")
# The registrations that name an op, and the parameter that takes the name.
SINKS = {"custom_op": "name", "triton_op": "name", "register_fake": "op", "register_kernel": "op",
         "register_autograd": "op", "register_vmap": "op", "register_torch_dispatch": "op",
         "impl_abstract": "qualname", "define": "qualname", "impl": "qualname"}
NAME_KEYWORDS = ("name", "qualname", "op", "ns")
REASONS = {
    "qualified": f"the op name is not built by {PREFIX_FN}(...)",
    "library": "a literal namespace is shared by every build of the kernel; use the build's own (see _ops.py)",
    "schema": "a literal `namespace::op` name; give the op name only (the library has the namespace)",
}


@dataclass(frozen=True)
class Sink:
    """A registration: `qualified` (a SINKS function), `library` (`Library(ns)`) or `schema`
    (`Library.define`/`impl`, where only a literal namespace is refused)."""
    kind: str
    display: str
    param: str

    def refuses(self, value: Value) -> bool:
        return value.literal_namespace if self.kind == "schema" else value.is_literal


def sink_of(callee) -> Sink | None:
    module, _, fn = callee.origin.rpartition(".") if isinstance(callee, Ext) else ("", "", "")
    if module == "torch.library.Library()" and fn in ("define", "impl"):
        return Sink("schema", f"Library.{fn}", "schema" if fn == "define" else "op_name")
    if module == "torch.library" and fn == "Library":
        return Sink("library", "torch.library.Library", "ns")
    if module in LIBRARY_MODULES and fn in SINKS:
        return Sink("qualified", f"torch.library.{fn}", SINKS[fn])
    return None


@dataclass(frozen=True)
class Violation:
    path: Path
    line: int
    call: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.call}: {self.reason}"


@dataclass(frozen=True)
class Flow:
    """A function parameter whose value reaches a registration."""
    sink: Sink
    where: str  # file:line of the registration


@dataclass(frozen=True, eq=False)
class Call:
    """A call of a package function (or its arguments bound by functools.partial)."""
    node: ast.Call
    scope: Scope
    callee: Func
    args: tuple
    keywords: tuple
    partial: bool
    display: str


def shown(expr: ast.expr) -> str:
    text = dotted(expr) or ast.unparse(expr)
    return text if len(text) <= 60 else text[:57] + "..."


class Check:
    def __init__(self, package: Package) -> None:
        self.p, self.r = package, Resolver(package)
        self.flows: dict[int, dict[tuple, Flow]] = defaultdict(dict)   # by id(function scope)
        self.calls: dict[int, list[Call]] = defaultdict(list)
        self.found: dict[tuple, Violation] = {}

    def run(self) -> list[Violation]:
        for node, scope in self.p.calls:
            args, keywords = [(a, scope) for a in node.args], [(k.arg, k.value, scope) for k in node.keywords]
            callees = self.r.eval(node.func, scope)
            for callee in callees:
                self.call(node, scope, callee, args, keywords, False, shown(node.func))
            if Ext("functools.partial") in callees and args:  # partial(f, name): a call of f
                for callee in self.r.eval(*args[0]):
                    self.call(node, scope, callee, args[1:], keywords, True, shown(args[0][0]))
        return list(self.found.values())

    def call(self, node: ast.Call, scope: Scope, callee, args, keywords, partial: bool, display: str) -> None:
        if isinstance(callee, Partial):
            for target in callee.targets:
                self.call(node, scope, target, [*callee.args, *args], [*callee.keywords, *keywords], partial, display)
        elif sink := sink_of(callee):
            if (value := self.name(sink, args, keywords)) is not None:
                flow = Flow(sink, f"{scope.module.shown}:{node.lineno}")
                self.reach(value, flow, node, scope, sink.display, REASONS[sink.kind])
        elif isinstance(callee, Cls) and not callee.instance:  # Class(...) calls its __init__
            for init in self.r.methods(callee.scope, "__init__", set()):
                self.call(node, scope, Func(init, 1), args, keywords, partial, display)
        elif isinstance(callee, Func):
            call = Call(node, scope, callee, tuple(args), tuple(keywords), partial, display)
            self.calls[id(callee.scope)].append(call)
            for slot in list(self.flows[id(callee.scope)]):
                self.through(call, slot)

    def name(self, sink: Sink, args, keywords) -> Value | None:
        """The op name a registration is given (None: none)."""
        if args:
            expr, scope = args[0]
            return self.forwarded(expr.value, scope, "varargs", ("vararg", 0)) \
                if isinstance(expr, ast.Starred) else self.r.value(expr, scope)
        accepted = {sink.param, *(NAME_KEYWORDS if sink.kind == "qualified" else ())}
        for key, expr, scope in keywords:
            if key in accepted:
                return self.r.value(expr, scope)
        return next((self.forwarded(expr, scope, "varkw", ("kwarg", sink.param))
                     for key, expr, scope in keywords if key is None), None)

    def forwarded(self, expr: ast.expr, scope: Scope, param: str, slot: tuple) -> Value | None:
        """The enclosing function's `*args` / `**kwargs`, handed on to a registration."""
        bindings = self.p.lookup(scope, expr.id) if isinstance(expr, ast.Name) else []
        if len(bindings) == 1 and bindings[0].kind == "param" and bindings[0].extra == (param,):
            return Value("param", slot=(bindings[0].scope, slot))
        return None

    def reach(self, value: Value, flow: Flow, node: ast.Call, scope: Scope, display: str, reason: str) -> None:
        """A name reaches a registration from a call: a literal is refused there, a parameter is
        followed to its function's calls (those seen so far and those still to come)."""
        if value.kind == "param":
            func, slot = value.slot
            if slot not in self.flows[id(func)]:
                self.flows[id(func)][slot] = flow
                for call in list(self.calls[id(func)]):
                    self.through(call, slot)
        elif flow.sink.refuses(value):
            path = scope.module.shown
            self.found.setdefault((path, node.lineno, node.col_offset, display),
                                  Violation(path, node.lineno, display, reason))

    def through(self, call: Call, slot: tuple) -> None:
        flow = self.flows[id(call.callee.scope)][slot]
        value, how = self.r.argument(call.callee, slot, list(call.args), list(call.keywords), call.partial)
        if how in ("arg", "default"):
            what = f"the default of `{slot[-1]}`, " if how == "default" else ""
            reason = f"{REASONS[flow.sink.kind]} ({what}passed on to {flow.sink.display} at {flow.where})"
            self.reach(value, flow, call.node, call.scope, call.display, reason)


def check_modules(package: str, files: list[tuple[Path, str, Path]]) -> list[Violation]:
    """Violations in a package's Python files: (source, path in the package, path shown)."""
    modules, found = [], []
    for src, rel, path in files:
        try:
            tree = ast.parse(src.read_bytes(), filename=str(path))
        except SyntaxError as e:
            found.append(Violation(path, e.lineno or 0, "syntax", f"not valid Python: {e.msg}"))
            continue
        parts = Path(rel).with_suffix("").parts
        is_package = parts[-1:] == ("__init__",)
        modules.append(Module(parts[:-1] if is_package else parts, is_package, path, tree))
    found += Check(Package(package, modules)).run()
    order = {path: i for i, (_, _, path) in enumerate(files)}
    return sorted(found, key=lambda v: (order[v.path], v.line))


def check_file(path: Path, shown: Path | None = None) -> list[Violation]:
    """Violations in one module, as a package of its own."""
    return check_modules(path.parent.name, [(path, path.name, shown or path)])


def check_package(files: list[tuple[Path, str]], project: Path) -> None:
    """Raises one BuildError listing every violation in the package's Python files."""
    sources = [(src, rel, src.relative_to(project) if src.is_relative_to(project) else src)
               for src, rel in files if src.suffix == ".py"]
    if not sources:
        return
    src, rel, _ = sources[0]
    found = check_modules(src.parents[len(Path(rel).parts) - 1].name, sources)
    if found:
        first, more = found[0], "".join(f"\n    {v}" for v in found[1:])
        raise BuildError(f"{first.call}: {first.reason}{more}", file=f"{project / first.path}:{first.line}",
                         hint=f'name ops with {PREFIX_FN}("my_op"), imported from ._ops')
