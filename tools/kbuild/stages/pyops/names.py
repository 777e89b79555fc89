"""What an op name is known to be, from where it comes (the values the rule judges).

text "mylib::op"  a literal string       literal  built from literals only
prefixed          built by add_op_namespace_prefix(...), or the generated `ops` (`ops.name`, an op)
param             a parameter of a package function: its call sites decide
unknown           anything else: not decidable statically
`ns` says that a literal's namespace part (before `::`) is literal too.
"""

from __future__ import annotations

from dataclasses import dataclass

PREFIX_FN = "add_op_namespace_prefix"  # recognised by name, as upstream does
GENERATED = "<_ops>"                   # the build's `_ops` module, written at build time
OPS = GENERATED + ".ops"


@dataclass(frozen=True)
class Value:
    kind: str                  # text | literal | prefixed | param | unknown
    text: str = ""
    ns: bool = False
    slot: tuple | None = None  # param: (function scope, slot), see Resolver.argument

    @property
    def is_literal(self) -> bool:
        return self.kind in ("text", "literal")


def text(s: str) -> Value:
    return Value("text", s, "::" in s.split("(")[0])


UNKNOWN, PREFIXED, LITERAL_NS = Value("unknown"), Value("prefixed"), Value("literal", ns=True)


@dataclass(frozen=True)
class Ext:
    """A name from outside the package: `torch.library.custom_op`; `torch.library.Library()` (what
    calling one gives); `<_ops>.ops.name` (the generated module)."""
    origin: str


def as_name(x) -> Value:
    """Anything an expression can be, as an op name."""
    if isinstance(x, Value):
        return x
    if isinstance(x, Ext) and (x.origin == OPS or x.origin.startswith(OPS + ".")):
        return PREFIXED
    return LITERAL_NS if isinstance(x, Ext) and x.origin.startswith("torch.ops.") else UNKNOWN


def concat(values: list[Value]) -> Value:
    """String parts glued in order: the namespace is decided by the text up to `::`."""
    s, exact, has_ns = "", True, False
    for v in values:
        if v.is_literal:
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
    if values and all(v.is_literal for v in values):
        return Value("literal", ns=all(v.ns for v in values))
    return UNKNOWN


def fill(template: Value, opening: str, fields: tuple[str, ...], first: Value) -> Value:
    """A `%` or `.format` template up to its second field, the first filled with `first`."""
    if template.kind != "text":
        return UNKNOWN
    head, sep, rest = template.text.partition(opening)
    field = next((f for f in fields if rest.startswith(f)), None)
    if "::" in head or not sep or field is None:
        return LITERAL_NS if "::" in head else UNKNOWN
    return concat([text(head), first, text(rest[len(field):].split(opening)[0])])
