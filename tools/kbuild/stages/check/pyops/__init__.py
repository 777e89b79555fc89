"""Python op registrations must use the build's op namespace (a static check with `ast`).

A kernel's ops live in the namespace of its build id (`_<name>_<backend>_<uid>`), which only the
generated `_ops.py` knows. A registration with a hand-written namespace (`"mylib::op"`) would
register into a namespace shared by every build of the kernel: two versions in one process then
clash, and the kernel's own `ops` never sees it. The rule, as upstream kernel-builder has it:

- the registrations of `SINKS` (`torch.library.custom_op`, `register_fake`, `define`, ...) must
  not name their op with a literal;
- `torch.library.Library(ns, ...)` must not be given a literal namespace, nor its `define`/`impl`
  a literal `ns::op` name.

Where a name comes from decides (evaluate.py):
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

This module states the rule (`sink_of`: what each registration refuses); collect.py records what
each name is bound to (pass 1), evaluate.py what an expression can be and where each
registration's name comes from (pass 2).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from ....core.errors import BuildError
from .collect import Module, Package
from .evaluate import PREFIX_FN, Eval, Ext, Value

LIBRARY_MODULES = ("torch.library", "torch._library.custom_ops", "torch._library.triton")
# The registrations that name an op, and the parameter that takes the name.
SINKS = {"custom_op": "name", "triton_op": "name", "register_fake": "op", "register_kernel": "op",
         "register_autograd": "op", "register_vmap": "op", "register_torch_dispatch": "op",
         "impl_abstract": "qualname", "define": "qualname", "impl": "qualname"}
NAME_KEYWORDS = ("name", "qualname", "op", "ns")  # also accepted as the name of a SINKS call


@dataclass(frozen=True)
class Sink:
    """A registration: as shown, the parameter (and keywords) giving the op name, why a name is
    refused; `schema`: only a literal namespace is (`Library.define`/`impl`)."""
    display: str
    param: str
    reason: str
    keywords: tuple = ()
    schema: bool = False

    def refuses(self, value: Value) -> bool:
        return value.ns if self.schema else value.kind in ("text", "literal")


@dataclass(frozen=True)
class Violation:
    path: Path
    line: int
    call: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.call}: {self.reason}"


def sink_of(callee) -> Sink | None:
    """The registration a callee (what evaluate.py says it can be) is, if any."""
    module, _, fn = callee.origin.rpartition(".") if isinstance(callee, Ext) else ("", "", "")
    if module == "torch.library.Library()" and fn in ("define", "impl"):
        return Sink(f"Library.{fn}", "schema" if fn == "define" else "op_name",
                    "a literal `namespace::op` name; give the op name only (the library has the "
                    "namespace)", schema=True)
    if module == "torch.library" and fn == "Library":
        return Sink("torch.library.Library", "ns", "a literal namespace is shared by every build "
                    "of the kernel; use the build's own (see _ops.py)")
    if module in LIBRARY_MODULES and fn in SINKS:
        return Sink(f"torch.library.{fn}", SINKS[fn],
                    f"the op name is not built by {PREFIX_FN}(...)", NAME_KEYWORDS)
    return None


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
    found += [Violation(*v) for v in Eval(Package(package, modules), sink_of).run()]
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
        raise BuildError(f"{first.call}: {first.reason}{more}",
                         file=f"{project / first.path}:{first.line}",
                         hint=f'name ops with {PREFIX_FN}("my_op"), imported from ._ops')
