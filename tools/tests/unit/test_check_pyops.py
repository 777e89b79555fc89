"""The static check of Python op registrations: names must come from add_op_namespace_prefix."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from kbuild.stages.check.pyops import check_file, check_modules, check_package
from kbuild.core.errors import BuildError

GOOD = """
import torch
from torch.library import custom_op, triton_op
import torch.library as tl

from ._ops import add_op_namespace_prefix, ops
from . import _ops


@torch.library.register_fake(add_op_namespace_prefix("a"))
def a_fake(x): ...


@custom_op(add_op_namespace_prefix("b"), mutates_args=())
def b(x: torch.Tensor) -> torch.Tensor: ...


@b.register_fake
def _(x): ...


@b.register_kernel("cpu")
def _(x): ...


tl.register_kernel(_ops.add_op_namespace_prefix("c"), "cuda")(lambda x: x)
torch.library.register_fake(ops.scale_out)(lambda *a: None)
torch.library.register_autograd(ops.scale_out.default, lambda ctx, g: g)
triton_op(add_op_namespace_prefix("d"), mutates_args=())
lib = torch.library.Library(_ops.ops.name, "FRAGMENT")
lib.define("e(Tensor x) -> Tensor")
lib.impl("e", lambda x: x, "CPU")
"""

BAD = """
import torch
from torch.library import custom_op, register_fake as fake
import torch.library as tl
from torch import library

NAME = "mylib::g"


@custom_op("mylib::a", mutates_args=())
def a(x: torch.Tensor) -> torch.Tensor: ...


@fake(f"mylib::{'b'}")
def b_fake(x): ...


tl.register_kernel(NAME, "cpu")(lambda x: x)
library.define("mylib::c(Tensor x) -> Tensor")
torch.library.impl(qualname="mylib::c", types="CPU")
torch.library.register_fake(torch.ops.mylib.d)
lib = torch.library.Library("mylib", "FRAGMENT")
ours = torch.library.Library(NAME, "IMPL")
ours.define("mylib::e(Tensor x) -> Tensor")
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "mod.py"
    path.write_text(textwrap.dedent(text))
    return path


def test_registrations_through_the_prefix_or_op_objects_pass(tmp_path):
    assert check_file(write(tmp_path, GOOD)) == []


def test_hand_written_namespaces_are_found_with_their_lines(tmp_path):
    found = check_file(write(tmp_path, BAD))
    assert [(v.line, v.call) for v in found] == [
        (10, "torch.library.custom_op"), (14, "torch.library.register_fake"),
        (18, "torch.library.register_kernel"), (19, "torch.library.define"),
        (20, "torch.library.impl"), (21, "torch.library.register_fake"),
        (22, "torch.library.Library"), (23, "torch.library.Library"), (24, "Library.define")]


def test_package_check_raises_one_error_with_file_and_line(tmp_path):
    project = tmp_path / "proj"
    pkg = project / "torch-ext" / "k"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("import torch\n\n\n@torch.library.custom_op('x::y', mutates_args=())\n"
                                     "def y(t: torch.Tensor) -> torch.Tensor: ...\n")
    (pkg / "data.json").write_text("{")
    with pytest.raises(BuildError) as e:
        check_package([(pkg / "__init__.py", "__init__.py"), (pkg / "data.json", "data.json")], project)
    assert str(e.value.file) == f"{pkg / '__init__.py'}:4"
    assert "add_op_namespace_prefix" in e.value.message and "add_op_namespace_prefix" in e.value.hint


def test_invalid_python_is_reported_not_raised(tmp_path):
    (found,) = check_file(write(tmp_path, "def broken(:\n"))
    assert found.line == 1 and found.call == "syntax"


# --- names passed through wrappers (issue 19) --------------------------------------------------
# Modelled on kernels-community's flash-attn-ops (utils/library.py: a triton_op that hands its
# `name` on to custom_op) and sonic-moe (quack/dsl/torch_library_op.py: cute_op, re-exported by
# quack/dsl/__init__.py; quack/_ops_compat.py: prefix helpers of their own).

FLASH_ATTN_OPS = {
    "__init__.py": "from .layer_norm import layer_norm_fn\n",
    "utils/__init__.py": "",
    "utils/library.py": """
        from typing import Callable, Iterable, Optional, Union

        from torch.library import custom_op, CustomOpDef


        def triton_op(
            name: str,
            fn: Optional[Callable] = None,
            /,
            *,
            mutates_args: Union[str, Iterable[str]],
            schema: Optional[str] = None,
            allow_decomposition=True,
        ) -> Callable:
            def dec(fn: Callable[..., object]) -> CustomOpDef:
                def backend_fn(*args, **kwargs):
                    return fn(*args, **kwargs)

                result = custom_op(name, backend_fn, mutates_args=mutates_args, schema=schema)  # sink
                result.register_fake(fn)
                if allow_decomposition:
                    def functional_decomp(mode, op, types, args, kwargs):
                        with mode:
                            return fn(*args, **kwargs)

                    result.register_torch_dispatch(object, functional_decomp)
                return result

            if fn is None:
                return dec
            return dec(fn)
        """,
    "_ops_compat.py": """
        try:
            from ._ops import add_op_namespace_prefix as _generated_add_op_namespace_prefix
        except ImportError:
            def _generated_add_op_namespace_prefix(name: str) -> str:
                return name if "::" in name else f"flash_attn_ops::{name}"


        def add_op_namespace_prefix(name: str) -> str:
            return _generated_add_op_namespace_prefix(name)
        """,
    "layer_norm.py": """
        import torch
        from torch import Tensor

        from .utils.library import triton_op
        from ._ops_compat import add_op_namespace_prefix


        @triton_op(add_op_namespace_prefix("layer_norm_fwd_impl"), mutates_args={"out"},
                   schema="(Tensor x, Tensor(a!) out) -> Tensor")
        def _layer_norm_fwd_impl(x: Tensor, out: Tensor) -> Tensor:
            return out.copy_(x)


        def layer_norm_fn(x: Tensor) -> Tensor:
            return _layer_norm_fwd_impl(x, torch.empty_like(x))
        """,
}

SONIC_MOE = {
    "__init__.py": "from .quack.softmax import softmax\n",
    "quack/__init__.py": "",
    "quack/dsl/__init__.py": """
        from .torch_library_op import cute_op

        __all__ = ["cute_op"]


        def __getattr__(name: str):
            if name == "cute_op":
                from .torch_library_op import cute_op

                return cute_op
            raise AttributeError(name)
        """,
    "quack/dsl/torch_library_op.py": """
        from __future__ import annotations

        from typing import Any, Callable, Iterable, Optional, Union

        import torch


        def cute_op(
            name: str,
            *,
            mutates_args: Union[str, Iterable[str]],
            schema: Optional[str] = None,
            device_types: Optional[Union[str, Iterable[str]]] = None,
        ) -> Callable:
            def dec(fn: Callable) -> Any:
                kwargs: dict[str, Any] = {"mutates_args": mutates_args}
                if schema is not None:
                    kwargs["schema"] = schema
                if device_types is not None:
                    kwargs["device_types"] = device_types
                op = torch.library.custom_op(name, fn, **kwargs)  # sink

                @op.register_fake
                def _fake(*args, **kw):
                    return None

                return op

            return dec
        """,
    "quack/_ops_compat.py": """
        from .._ops import add_op_namespace_prefix as _add_op_namespace_prefix


        # Named like the function it wraps (upstream's check goes by that name).
        def add_op_namespace_prefix(name: str) -> str:
            return _add_op_namespace_prefix(f"quack__{name}")


        def add_quack_op_namespace_prefix(name: str) -> str:
            return _add_op_namespace_prefix(f"quack__{name}")
        """,
    "quack/softmax.py": """
        import torch

        from ._ops_compat import add_op_namespace_prefix
        from .dsl import cute_op


        @cute_op(add_op_namespace_prefix("_softmax_fwd"), mutates_args={"out"})
        def _softmax_fwd(x: torch.Tensor, out: torch.Tensor) -> None:
            out.copy_(torch.softmax(x, -1))


        def softmax(x: torch.Tensor) -> torch.Tensor:
            out = torch.empty_like(x)
            _softmax_fwd(x, out)
            return out
        """,
    "quack/gemm_interface.py": """
        import torch
        from torch import Tensor

        from ._ops_compat import add_quack_op_namespace_prefix


        @torch.library.custom_op(
            add_quack_op_namespace_prefix("gemm_out"),
            mutates_args=("out",),
            device_types="cuda",
            schema="(Tensor A, Tensor B, Tensor(a2!) out) -> ()",
        )
        def gemm_out(A: Tensor, B: Tensor, out: Tensor) -> None:
            torch.mm(A, B, out=out)
        """,
}


def make_package(tmp_path: Path, name: str, files: dict[str, str]) -> tuple[Path, list]:
    """A project with torch-ext/<name>/ holding `files`; returns it and python_files-like pairs."""
    project = tmp_path / name
    pkg = project / "torch-ext" / name
    for rel, text in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(textwrap.dedent(text))
    return project, sorted(((p, p.relative_to(pkg).as_posix()) for p in pkg.rglob("*.py")),
                           key=lambda item: item[1])


def line_of(text: str, marker: str) -> int:
    (line,) = [i for i, s in enumerate(textwrap.dedent(text).splitlines(), 1) if marker in s]
    return line


@pytest.mark.parametrize("name, files", [("flash_attn_ops", FLASH_ATTN_OPS), ("sonic_moe", SONIC_MOE)])
def test_kernels_community_wrappers_pass(tmp_path, name, files):
    """Both build with upstream kernel-builder; the old check refused the wrapper's custom_op(name)."""
    project, pairs = make_package(tmp_path, name, files)
    check_package(pairs, project)


@pytest.mark.parametrize("name, files, module, call, literal, sink", [
    ("flash_attn_ops", FLASH_ATTN_OPS, "layer_norm.py", "triton_op",
     'add_op_namespace_prefix("layer_norm_fwd_impl")', "utils/library.py"),
    ("sonic_moe", SONIC_MOE, "quack/softmax.py", "cute_op",
     'add_op_namespace_prefix("_softmax_fwd")', "quack/dsl/torch_library_op.py"),
])
def test_literal_name_through_a_wrapper_is_refused_at_the_call_site(
        tmp_path, name, files, module, call, literal, sink):
    bad = dict(files)
    bad[module] = files[module].replace(literal, f'"{name}::op"')
    project, pairs = make_package(tmp_path, name, bad)
    with pytest.raises(BuildError) as e:
        check_package(pairs, project)
    pkg = Path("torch-ext") / name
    line = line_of(bad[module], f'"{name}::op"')
    assert str(e.value.file) == f"{project / pkg / module}:{line}"
    sink_line = line_of(files[sink], "# sink")
    assert e.value.message == (
        f"{call}: the op name is not built by add_op_namespace_prefix(...) "
        f"(passed on to torch.library.custom_op at {pkg / sink}:{sink_line})")


WRAPPERS = """
import functools
from functools import partial

import torch
from torch.library import custom_op

from ._ops import add_op_namespace_prefix, ops

LIB = "mylib"


def my_op(name, **kwargs):  # a decorator factory
    return torch.library.custom_op(name, mutates_args=(), **kwargs)


def forward_all(*args, **kwargs):
    return custom_op(*args, **kwargs)


def define_op(**kwargs):
    torch.library.define(**kwargs)


def fake_for(fn, op_name):
    torch.library.register_fake(op_name, fn)


def impl_cpu(fn, qualname="mylib::e"):
    return torch.library.impl(qualname, "cpu", fn)


def kernel_for(name):
    def register(fn):
        return torch.library.register_kernel(name, "cpu")(fn)
    return register


def twice(name):
    return my_op(name), fake_for(None, name)


def dispatch_op(op, cls):
    return torch.library.register_torch_dispatch(op, cls)


op_cpu = functools.partial(torch.library.custom_op, mutates_args=(), device_types="cpu")
fake_lambda = lambda name, fn=None: torch.library.register_fake(name, fn)  # noqa: E731


class Registry:
    def op(self, name, **kwargs):
        return self._op(name, **kwargs)

    def _op(self, name, **kwargs):
        return torch.library.custom_op(name, **kwargs)

    @staticmethod
    def vmap(name, fn):
        return torch.library.register_vmap(name, fn)

    @classmethod
    def autograd(cls, name, backward):
        return torch.library.register_autograd(name, backward)


registry = Registry()


class CustomOp:
    def __init__(self, name, fn):
        self.op = torch.library.custom_op(name, fn, mutates_args=())
"""

WRAPPERS_BAD = WRAPPERS + """

@my_op("mylib::a")  # flagged: my_op
def a(x: torch.Tensor) -> torch.Tensor: ...


forward_all("mylib::b", mutates_args=())  # flagged: forward_all
define_op(qualname=LIB + "::c", schema="(Tensor x) -> Tensor")  # flagged: define_op
fake_for(op_name=f"{LIB}::d", fn=lambda x: x)  # flagged: fake_for
impl_cpu(lambda x: x)  # flagged: impl_cpu


@impl_cpu  # flagged: impl_cpu
def e_cpu(x): ...


kernel_for("mylib::f")(lambda x: x)  # flagged: kernel_for
twice("mylib::g")  # flagged: twice
dispatch_op(torch.ops.mylib.h, object)  # flagged: dispatch_op
op_cpu("mylib::i")(lambda x: x)  # flagged: torch.library.custom_op
partial(my_op, "mylib::j")  # flagged: my_op
fake_lambda("mylib::k")  # flagged: fake_lambda
registry.op("mylib::l", mutates_args=())  # flagged: registry.op
Registry().op("mylib::m", mutates_args=())  # flagged: Registry().op
Registry.vmap("mylib::n", None)  # flagged: Registry.vmap
registry.autograd("mylib::o", None)  # flagged: registry.autograd
CustomOp("mylib::p", lambda x: x)  # flagged: CustomOp
"""

WRAPPERS_GOOD = WRAPPERS + """
from . import _ops
from .helpers import opname, qualified


def build_name(op):
    return add_op_namespace_prefix(op)


NS = ops.name
PREFIX = add_op_namespace_prefix("")


@my_op(add_op_namespace_prefix("a"))
def a(x: torch.Tensor) -> torch.Tensor: ...


forward_all(build_name("b"), mutates_args=())
define_op(qualname=f"{NS}::c", schema="(Tensor x) -> Tensor")
fake_for(op_name=PREFIX + "d", fn=lambda x: x)
impl_cpu(lambda x: x, qualname=_ops.ops.name + "::e")
kernel_for("::".join([ops.name, "f"]))(lambda x: x)
twice("{}::g".format(_ops.ops.name))
dispatch_op(ops.h.default, object)
op_cpu(add_op_namespace_prefix("i"))(lambda x: x)
partial(my_op, add_op_namespace_prefix("j"))
fake_lambda(a)
registry.op(f"{add_op_namespace_prefix('l')}", mutates_args=())
Registry.vmap(add_op_namespace_prefix("n").split("::")[0] + "::n", None)
namespace, _ = add_op_namespace_prefix("o").split("::")
registry.autograd(f"{namespace}::o", None)
CustomOp(add_op_namespace_prefix("p"), lambda x: x)

# Not decidable statically: accepted.
my_op(opname("p"))                     # a function of another module that is not here
my_op(qualified)                       # a variable of a module that is not here
my_op(*["mylib::q"])                   # unpacked arguments
forward_all(**{"name": "mylib::r"})
config = {"name": "mylib::s"}
my_op(config["name"])                  # a subscript
for name in ("mylib::t", "mylib::u"):  # a loop variable
    my_op(name)


def register_all(names, prefix):
    for op in names:
        torch.library.register_fake(op)            # a loop variable
    torch.library.register_fake(prefix.qualify("v"))  # a method of a parameter
    return my_op(names[0])                         # a subscript of a parameter


def exported(name):
    return my_op(name)  # a parameter whose callers are outside the package


def flexible(name):
    return my_op(name if "::" in name else add_op_namespace_prefix(name))


flexible("mylib::w")


class Config:
    def __init__(self, name):
        self.name = name

    def register(self):
        return my_op(self.name)  # an attribute


@functools.cache
def cached(name):
    return my_op(name)


def unknown_decorator(fn):
    return fn


@unknown_decorator
def decorated(name):
    return my_op(name)


decorated("mylib::x")  # what the decorator returns is not known
"""


def marked(text: str) -> list[tuple[int, str]]:
    return [(i, s.split("# flagged: ")[1]) for i, s in enumerate(text.splitlines(), 1)
            if "# flagged: " in s]


def test_literal_names_through_wrappers_are_refused_at_each_call_site(tmp_path):
    found = check_file(write(tmp_path, WRAPPERS_BAD))
    assert [(v.line, v.call) for v in found] == marked(WRAPPERS_BAD)
    by_call = {v.call: v for v in found}
    sink = line_of(WRAPPERS, "def impl_cpu") + 1
    assert by_call["impl_cpu"].reason == (
        "the op name is not built by add_op_namespace_prefix(...) (the default of `qualname`, "
        f"passed on to torch.library.impl at {tmp_path / 'mod.py'}:{sink})")
    twice = line_of(WRAPPERS_BAD, "# flagged: twice")
    assert str(by_call["twice"]).startswith(f"{tmp_path / 'mod.py'}:{twice}: twice: the op name ")


def test_names_built_by_the_prefix_or_not_decidable_pass_through_wrappers(tmp_path):
    assert check_file(write(tmp_path, WRAPPERS_GOOD)) == []


def test_names_built_from_literals_are_refused_where_they_are_registered(tmp_path):
    source = """
    import torch
    from torch.library import Library

    from .constants import LIBRARY_NAME

    SCHEMA = "(Tensor x) -> Tensor"


    def qualify(op):
        return "mylib::" + op


    def ns_op(op):
        return torch.library.custom_op(f"mylib::{op}", mutates_args=())  # flagged


    torch.library.register_fake(qualify("a"))  # flagged
    torch.library.register_fake(f"{LIBRARY_NAME}::b")  # flagged
    torch.library.register_fake("%s::c" % LIBRARY_NAME)  # flagged
    torch.library.register_fake("a" if LIBRARY_NAME else "b")  # flagged
    lib = Library(LIBRARY_NAME, "FRAGMENT")  # flagged
    lib.define(f"{LIBRARY_NAME}::d" + SCHEMA)  # flagged
    lib.define("d" + SCHEMA)
    """
    project, pairs = make_package(tmp_path, "k", {"mod.py": source,
                                                   "constants.py": 'LIBRARY_NAME = "mylib"\n'})
    with pytest.raises(BuildError) as e:
        check_package(pairs, project)
    lines = [i for i, s in enumerate(textwrap.dedent(source).splitlines(), 1) if "# flagged" in s]
    shown = [ln.strip() for ln in e.value.message.splitlines()[1:]]
    assert str(e.value.file).endswith(f"mod.py:{lines[0]}")
    assert [int(s.split(":")[1]) for s in shown] == lines[1:]


def test_op_objects_and_absolute_imports_of_the_package(tmp_path):
    project, pairs = make_package(tmp_path, "k", {
        "__init__.py": "",
        "wrap.py": "import torch\n\n\ndef reg(name):\n    return torch.library.register_fake(name)\n",
        "mod.py": textwrap.dedent("""
            import torch
            import k.wrap as w
            from k.wrap import reg


            @torch.library.custom_op("k_literal::op", mutates_args=())
            def op(x: torch.Tensor) -> torch.Tensor: ...


            torch.library.register_fake(op)  # a CustomOpDef: accepted
            reg("mylib::a")
            w.reg("mylib::b")
            """),
    })
    with pytest.raises(BuildError) as e:
        check_package(pairs, project)
    assert str(e.value.file).endswith("mod.py:7")
    assert [ln.strip().split(": ")[1] for ln in e.value.message.splitlines()[1:]] == ["reg", "w.reg"]


def test_cyclic_imports_and_recursive_wrappers_end(tmp_path):
    project, pairs = make_package(tmp_path, "k", {
        "a.py": "from .b import NAME, reg\n\nreg(NAME)\n",
        "b.py": textwrap.dedent("""
            import torch

            from .a import NAME


            def reg(name, depth=0):
                if depth:
                    return reg(name, depth - 1)
                return torch.library.register_fake(name)
            """),
    })
    check_package(pairs, project)  # NAME is bound only by the two imports: not decidable


# --- cases the rewrite of issue 35 keeps (star imports, `self.lib`, inherited methods, scopes) --

KEPT = """
import torch
from torch.library import Library

from ._ops import ops
from .names import *

NS = "mylib"
REBOUND = "mylib::r"
SHADOWED = "mylib::s"


class Holder:
    def __init__(self):
        self.lib = Library(NS, "FRAGMENT")  # flagged: torch.library.Library
        self.lib.define("mylib::a(Tensor x) -> Tensor")  # flagged: Library.define
        self.lib.define("a(Tensor x) -> Tensor")


class Base:
    def reg(self, name):
        return torch.library.register_fake(name)


class Child(Base):
    pass


Child().reg("mylib::b")  # flagged: Child().reg
torch.library.register_fake(STAR_LITERAL)  # flagged: torch.library.register_fake
torch.library.register_fake(STAR_PREFIXED)


def rebind():
    global REBOUND
    REBOUND = ops.name + "::r"


torch.library.register_fake(REBOUND)  # another binding, through `global`: not decidable
[SHADOWED for SHADOWED in range(2)]   # a comprehension's own name
torch.library.register_fake(SHADOWED)  # flagged: torch.library.register_fake


def outer():
    name = "mylib::c"

    def inner():
        nonlocal name
        name = ops.name + "::c"
    inner()
    return torch.library.define(name)  # rebound through `nonlocal`: not decidable
"""


FOLLOWED = """
import torch


def registrar():
    return torch.library.register_fake


def reg(first, name):
    return torch.library.register_fake(name)


registrar()("mylib::a")  # flagged: torch.library.register_fake
reg(*[1], name="mylib::b")  # flagged: reg
reg(*["mylib::c"])  # unpacked: not decidable
"""


def test_star_imports_library_attributes_inherited_methods_and_scopes(tmp_path):
    _, pairs = make_package(tmp_path, "k", {
        "mod.py": KEPT,
        "names.py": 'from ._ops import add_op_namespace_prefix\n\nSTAR_LITERAL = "mylib::x"\n'
                    'STAR_PREFIXED = add_op_namespace_prefix("x")\n'})
    found = check_modules("k", [(src, rel, Path(rel)) for src, rel in pairs])
    assert [(v.path.name, v.line, v.call) for v in found] == [("mod.py", *m) for m in marked(KEPT)]


def test_a_registration_returned_by_a_package_function_and_a_name_after_star_args(tmp_path):
    """Found since issue 35: what a package function returns is followed as a callee too, and a
    keyword argument binds its parameter even after `*args` (Python's own binding rules)."""
    found = check_file(write(tmp_path, FOLLOWED))
    assert [(v.line, v.call) for v in found] == marked(FOLLOWED)
