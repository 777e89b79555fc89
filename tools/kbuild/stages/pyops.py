"""Python op registrations must use the build's op namespace (a static check with `ast`).

A kernel's ops live in the namespace of its build id (`_<name>_<backend>_<uid>`), which only the
generated `_ops.py` knows. A registration with a hand-written namespace (`"mylib::op"`) would
register into a namespace shared by every build of the kernel: two versions in one process then
clash, and the kernel's own `ops` never sees it. So, like upstream's kernel-builder, a call of
`torch.library.custom_op`, `triton_op`, `register_fake`, `register_kernel`, `register_autograd`,
`register_vmap`, `register_torch_dispatch`, `impl_abstract`, `define` or `impl` must name its op
with `add_op_namespace_prefix(...)` (or pass an op object from `ops`), and a
`torch.library.Library` must not be given a literal namespace, nor its `define`/`impl` a literal
`ns::op` name.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import BuildError

QUALIFIED = {"custom_op", "triton_op", "register_fake", "register_kernel", "register_autograd",
             "register_vmap", "register_torch_dispatch", "impl_abstract", "define", "impl"}
LIBRARY_MODULES = ("torch.library", "torch._library.custom_ops", "torch._library.triton")
PREFIX_FN = "add_op_namespace_prefix"


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


class _Checker(ast.NodeVisitor):
    def __init__(self, path: Path) -> None:
        self.path = path
        self.aliases: dict[str, str] = {}  # local name -> dotted origin
        self.libraries: set[str] = set()   # names bound to torch.library.Library(...)
        self.ops_names: set[str] = set()   # names bound to `ops` of the generated _ops
        self.violations: list[Violation] = []

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for a in node.names:
            local = a.asname or a.name
            if node.level and node.module in ("_ops", None) and a.name == "ops":
                self.ops_names.add(local)
            if node.module and not node.level:
                self.aliases[local] = f"{node.module}.{a.name}"

    def resolve(self, node: ast.expr) -> str | None:
        dotted = _dotted(node)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        origin = self.aliases.get(head, head)
        return f"{origin}.{rest}" if rest else origin

    def _ok_name(self, arg: ast.expr) -> bool:
        if isinstance(arg, ast.Call):
            fn = _dotted(arg.func) or ""
            return fn.split(".")[-1] == PREFIX_FN
        root = arg
        while isinstance(root, ast.Attribute):
            root = root.value
        if isinstance(root, ast.Name) and root.id in self.ops_names:
            return True  # an op object of this build: ops.<name>[.overload]
        return False

    def _report(self, node: ast.AST, call: str, reason: str) -> None:
        self.violations.append(Violation(self.path, getattr(node, "lineno", 0), call, reason))

    def visit_Assign(self, node: ast.Assign) -> None:
        if isinstance(node.value, ast.Call) and self._is_library_ctor(node.value):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    self.libraries.add(t.id)
                elif isinstance(t, ast.Attribute) and (d := _dotted(t)):
                    self.libraries.add(d)
        self.generic_visit(node)

    def _is_library_ctor(self, call: ast.Call) -> bool:
        origin = self.resolve(call.func) or ""
        return origin in ("torch.library.Library", "torch.library.Library.__init__")

    def visit_Call(self, node: ast.Call) -> None:
        origin = self.resolve(node.func) or ""
        module, _, fn = origin.rpartition(".")
        first = node.args[0] if node.args else next(
            (k.value for k in node.keywords if k.arg in ("name", "qualname", "op", "ns")), None)
        if self._is_library_ctor(node):
            if isinstance(first, (ast.Constant, ast.JoinedStr)):
                self._report(node, "torch.library.Library", "a literal namespace is shared by "
                             "every build of the kernel; use the build's own (see _ops.py)")
        elif module in LIBRARY_MODULES and fn in QUALIFIED and first is not None:
            if not self._ok_name(first):
                self._report(node, f"torch.library.{fn}", f"the op name is not built by "
                             f"{PREFIX_FN}(...)")
        elif (isinstance(node.func, ast.Attribute) and node.func.attr in ("define", "impl")
              and _dotted(node.func.value) in self.libraries and first is not None):
            literal = first.value if isinstance(first, ast.Constant) else None
            if isinstance(literal, str) and "::" in literal.split("(")[0]:
                self._report(node, f"Library.{node.func.attr}", "a literal `namespace::op` name; "
                             "give the op name only (the library has the namespace)")
        self.generic_visit(node)


def check_file(path: Path, shown: Path | None = None) -> list[Violation]:
    shown = shown or path
    try:
        tree = ast.parse(path.read_bytes(), filename=str(shown))
    except SyntaxError as e:
        return [Violation(shown, e.lineno or 0, "syntax", f"not valid Python: {e.msg}")]
    checker = _Checker(shown)
    checker.visit(tree)
    return checker.violations


def check_package(files: list[tuple[Path, str]], project: Path) -> None:
    """Raises one BuildError listing every violation in the package's Python files."""
    found: list[Violation] = []
    for src, _ in files:
        if src.suffix != ".py":
            continue
        try:
            shown = src.relative_to(project)
        except ValueError:
            shown = src
        found += check_file(src, shown)
    if not found:
        return
    first = found[0]
    more = "".join(f"\n    {v}" for v in found[1:])
    raise BuildError(f"{first.call}: {first.reason}{more}", file=f"{project / first.path}:{first.line}",
                     hint=f'name ops with {PREFIX_FN}("my_op"), imported from ._ops')
