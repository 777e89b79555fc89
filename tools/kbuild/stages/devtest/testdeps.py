"""What a project's tests need besides torch and kernels, as PEP 508 requirements: what
kernel-builder's test interpreter holds (upstream's `ci-test`), and the project's own list.

- pytest, and numpy (nixpkgs' torch brings numpy, PyPI's torch does not);
- each tested variant's `python-depends` (its metadata.json), as PyPI names (core/pydeps.py);
- the `pythonCheckInputs` of the project's `flake.nix`, in the forms kernel-builder's docs and
  kernels-community write — `ps: with ps; [ einops ]`, `pkgs: with pkgs; [ tqdm py-cpuinfo ]`,
  `ps: [ ps.einops ]` — nixpkgs attribute names, which are PyPI's normalised names but for the
  few in NIX_TO_PYPI; any other form is a warning naming the file, never a guess;
- `tests/requirements.txt`: requirement lines (names, versions, markers) for projects without
  Nix; upstream ignores the file. Options, URLs and paths are refused.

Nothing here installs anything: matrix/testtools.py `test_tools` installs what the interpreter lacks,
beside its environment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from ...core.built import BuiltVariant
from ...core.errors import BuildError
from ...core.pydeps import pypi_names

FLAKE = "flake.nix"
REQUIREMENTS = Path("tests") / "requirements.txt"
ALWAYS = ("pytest", "numpy")

# nixpkgs attribute names that are not the PyPI name (the rest are PyPI's normalised names).
NIX_TO_PYPI = {
    "pytorch": "torch", "torch-bin": "torch", "pytorch-bin": "torch", "torchWithCuda": "torch",
    "torchWithRocm": "torch", "torchWithoutCuda": "torch",
    "opencv4": "opencv-python", "tensorflow-bin": "tensorflow", "jaxlib-bin": "jaxlib",
    "dateutil": "python-dateutil", "tvm-ffi": "apache-tvm-ffi", "pyyaml": "PyYAML",
}

_IDENT = r"[A-Za-z_][A-Za-z0-9_-]*"
_ASSIGN = re.compile(r"\bpythonCheckInputs\s*=")
# `ps: with ps; [ a b ]` (any argument name) and `ps: [ ps.a ps.b ]`, each ended by `;`.
_WITH_FORM = re.compile(rf"\s*({_IDENT})\s*:\s*with\s+\1\s*;\s*\[([^\[\]]*)\]\s*;")
_LIST_FORM = re.compile(rf"\s*({_IDENT})\s*:\s*\[([^\[\]]*)\]\s*;")
_COMMENTS = re.compile(r"/\*.*?\*/|#[^\n]*", re.S)
WRITE_INSTEAD = ("write `pythonCheckInputs = ps: with ps; [ name1 name2 ];` (nixpkgs attribute "
                 "names), or list the packages in tests/requirements.txt")


@dataclass(frozen=True)
class Need:
    requirement: str  # PEP 508
    source: str       # where it comes from, said when it cannot be installed


def check_inputs(project: Path, warn: Callable[[str], None]) -> list[str]:
    """PyPI names of flake.nix's `pythonCheckInputs`; [] (with a warning) for another form."""
    path = project / FLAKE
    try:
        text = _COMMENTS.sub(" ", path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as e:
        warn(f"{path}: not read ({e}); its pythonCheckInputs are not installed for the tests")
        return []
    found = list(_ASSIGN.finditer(text))
    if not found:
        return []
    if len(found) > 1:
        warn(f"{path}: pythonCheckInputs is set {len(found)} times; none of them is used "
             f"for the tests: {WRITE_INSTEAD}")
        return []
    rest = text[found[0].end():]
    match = _WITH_FORM.match(rest)
    names = match.group(2).split() if match else None
    if match is None and (match := _LIST_FORM.match(rest)):
        arg = match.group(1)
        items = match.group(2).split()
        names = [i.removeprefix(f"{arg}.") for i in items] \
            if all(i.startswith(f"{arg}.") for i in items) else None
    if names is None or not all(re.fullmatch(_IDENT, n) for n in names):
        line = text.count("\n", 0, found[0].start()) + 1
        warn(f"{path}:{line}: pythonCheckInputs is not in a form kbuild reads, so the tests get "
             f"none of it: {WRITE_INSTEAD}")
        return []
    return [NIX_TO_PYPI.get(n, n) for n in names]


def declared(project: Path) -> list[str]:
    """tests/requirements.txt: requirement lines, `#` comments; anything else refused."""
    path = project / REQUIREMENTS
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as e:
        raise BuildError(f"cannot be read: {e}", file=path) from None
    out = []
    for number, raw in enumerate(lines, 1):
        line = re.sub(r"(^|\s)#.*", "", raw).strip()
        if not line:
            continue
        why = None
        if line.startswith("-") or line.endswith("\\"):
            why = "options, includes and continued lines are not read here"
        else:
            try:
                req = Requirement(line)
                why = "a URL or path is not read here" if req.url else None
            except InvalidRequirement as e:
                why = f"not a requirement ({str(e).splitlines()[0]})"
        if why:
            raise BuildError(f"line {number} `{raw.strip()}`: {why}", file=path,
                             hint="one package a line, as `name`, `name>=1.2` or "
                                  "`name; python_version >= \"3.10\"`, from your package index")
        out.append(line)
    return out


def python_depends(variants: tuple[Path, ...]) -> list[Need]:
    """The python-depends of each variant (metadata.json) as PyPI names; a variant whose
    metadata does not read adds none (the loader says what is wrong with it)."""
    needs = []
    for variant in variants:
        built, _ = BuiltVariant.read(variant)
        if built is None:
            continue
        meta = built.metadata
        for name in pypi_names(meta.python_depends, meta.backend.type, variant / "metadata.json"):
            needs.append(Need(name, f"python-depends of {variant.name}"))
    return needs


def test_needs(project: Path, variants: tuple[Path, ...], warn: Callable[[str], None]
               ) -> list[Need]:
    """Everything the tests of `project` need to load `variants` (a requirement said twice
    counted once; the same package with other versions or markers kept, pip combines them)."""
    needs = [Need(name, "kernel-builder's test interpreter holds it") for name in ALWAYS]
    needs += python_depends(variants)
    needs += [Need(n, f"{FLAKE} pythonCheckInputs") for n in check_inputs(project, warn)]
    needs += [Need(r, str(REQUIREMENTS)) for r in declared(project)]
    seen: set[tuple] = set()
    out = []
    for need in needs:
        req = Requirement(need.requirement)
        key = (canonicalize_name(req.name), tuple(sorted(req.extras)), str(req.specifier),
               str(req.marker or ""))
        if key not in seen:
            seen.add(key)
            out.append(need)
    return out
