"""Verify a build folder — layout, metadata, digest, ELF/ABI policy, and a real load."""

from __future__ import annotations

import atexit
import os
import re
import sys
import threading
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from ...core.backend import Backend
from ...core.built import BuiltVariant, variant_dirs  # noqa: F401  (check's own name too)
from ...core.errors import BuildError
from ...core.runner import Worker
from ...core.secrets import without_secrets
from ...core.signature import INVALID, STALE, signature_state
from ...core.variant import Variant, VariantError
from ...core.layout import MANIFEST, METADATA
from ...core.loader import loader_data
from . import binary, probe_memo

MANYLINUX = "manylinux_2_28"
PYTHON_ABI = "3.9"
HEX_COMMIT = re.compile(r"^([0-9a-f]{40}|[0-9a-f]{64})$")
ALLOWED_NEEDED = re.compile(
    r"^(lib(c|m|dl|rt|pthread|stdc\+\+|gcc_s)\.so\.\d+|ld-linux-[\w-]+\.so\.\d+"
    r"|lib(c10|c10_cuda|torch|torch_cpu|torch_cuda|torch_python|shm)\.so"
    r"|lib(cudart|cublas|cublasLt|cusparse|cusolver|cufft|curand|nvrtc|nvJitLink|cudnn|nccl"
    r"|cuda)\.so(\.\d+)*)$")


class Problem(str):
    """A check failure: its text, and a `code` (`<area>.<kind>`) that callers decide on."""

    code: str

    def __new__(cls, code: str, message: str) -> "Problem":
        obj = super().__new__(cls, message)
        obj.code = code
        return obj


# __pycache__/ in a variant: never shipped and never read by the load, so not fatal to upload.
# (A .pyc outside __pycache__/ is: Python imports it where its source is missing.)
BYTECODE = "layout.bytecode"
# A local build (--cuda-capabilities): never published, but its load is still checked.
LOCAL_BUILD = "metadata.local-build"
# A release build split by KBUILD_NVCC_SPLIT: its kernels may run slower; never published either.
SPLIT_BUILD = "metadata.split-build"
# metadata.json.sigstore that does not parse, or signs other bytes: `upload --sign` replaces it.
SIGNATURE_INVALID, SIGNATURE_STALE = "signature.invalid", "signature.stale"
SIGNATURE_CODES = (SIGNATURE_INVALID, SIGNATURE_STALE)


@dataclass
class CheckReport:
    variant: str
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    loaded: bool | None = None  # None: not attempted on this machine

    @property
    def ok(self) -> bool:
        return not self.problems


def abi_problems(so: Path) -> list[Problem]:
    import kernel_abi_check as kac

    obj = kac.ObjectFile(str(so))
    problems = [Problem("abi.manylinux", f"{so.name}: {s.name}@{s.dep}_{s.version} is newer than "
                        f"{MANYLINUX} allows") for s in obj.check_manylinux(MANYLINUX)]
    for s in obj.check_python_abi(PYTHON_ABI):
        if hasattr(s, "version_added"):
            problems.append(Problem("abi.python", f"{so.name}: {s.name} needs Python "
                                                  f"{s.version_added} (> {PYTHON_ABI})"))
        else:
            problems.append(Problem("abi.python", f"{so.name}: {s.name} is not in the Python "
                                                  "limited API (abi3)"))
    needed, paths = binary.elf_dynamic(so)
    problems += [Problem("abi.needed", f"{so.name}: links {n}, which is neither torch's nor a CUDA "
                                       "library torch ships") for n in needed if not ALLOWED_NEEDED.match(n)]
    problems += [Problem("abi.rpath", f"{so.name}: has RPATH/RUNPATH {p!r} (must not point into "
                                      "the build machine)") for p in paths]
    return problems


def code_problems(so: Path, backend: Backend, archs: list[str], stable: bool) -> list[Problem]:
    """The binary against its promises: GPU code for every declared capability (CUDA fat binary,
    HIP offload bundles) and, for a stable-ABI variant, no torch C++ API symbol."""
    problems: list[Problem] = []
    if backend == Backend.CUDA and archs:
        codes = binary.cuda_code(so)
        have = ", ".join(c.name for c in codes) or "none"
        problems += [Problem("code.capability", f"{so.name}: {p} (the fat binary holds {have})")
                     for p in binary.cuda_coverage_problems(codes, archs)]
    elif backend == Backend.ROCM and archs:
        targets, compressed = binary.rocm_targets(so)
        if not compressed:
            problems += [Problem("code.capability", f"{so.name}: {p}")
                         for p in binary.rocm_coverage_problems(targets, archs)]
    if stable:
        bad = binary.non_stable_symbols(so)
        names = binary.demangle(bad[:5])
        problems += [Problem("abi.torch-stable", f"{so.name}: uses {names[n]}, which is not in "
                             "torch's stable ABI") for n in bad[:5]]
        if len(bad) > 5:
            problems.append(Problem("abi.torch-stable", f"{so.name}: … and {len(bad) - 5} more "
                                    "torch symbols outside the stable ABI"))
    return problems


def unresolved_problems(so: Path, lib_dirs: list[Path]) -> list[Problem]:
    missing = binary.unresolved_symbols(so, lib_dirs)
    names = binary.demangle(missing)
    return [Problem("link.unresolved", f"{so.name}: unresolved symbol {names[n]}"
                    + (f" ({n})" if names[n] != n else "")) for n in missing]


def verify_build(plan, so: Path) -> None:
    """Post-link checks of a new build; the first failure stops the build (BuildError). A `.so`
    that passed them and has not been relinked since is not checked again (no-op rebuilds)."""
    st = so.stat()
    stamp = so.with_name(so.name + ".verified")
    fingerprint = f"{st.st_mtime_ns} {st.st_size} {plan.name} {' '.join(plan.archs)}"
    if stamp.is_file() and stamp.read_text() == fingerprint:
        return
    lib_dirs = [Path(plan.torch.lib_dir)] + ([Path(plan.cuda.cudart).parent] if plan.cuda else [])
    problems = unresolved_problems(so, lib_dirs)
    problems += code_problems(so, plan.backend, plan.archs, plan.stable_abi is not None)
    if problems:
        code = problems[0].code
        hint, key = {
            "link.unresolved": ("define it in a kernel of this backend, or guard its use (e.g. "
                                f"#ifdef {plan.backend.kernel_define})", None),
            "code.capability": ("compile for the capability or drop it from cuda-capabilities",
                                "cuda-capabilities"),
            "abi.torch-stable": ("use only torch/csrc/stable/ APIs, or remove torch.stable-abi",
                                 "torch.stable-abi")}[code]
        raise BuildError("\n    ".join(problems), file=plan.project / MANIFEST, key=key, hint=hint)
    stamp.write_text(fingerprint)


def _parsed(built: BuiltVariant) -> Variant | None:
    try:
        return Variant.parse(built.name)
    except VariantError:
        return None  # layout_problems reports the name


def metadata_problems(built: BuiltVariant) -> list[Problem]:
    meta, parsed = built.metadata, _parsed(built)
    problems: list[Problem] = []
    try:
        Metadata = loader_data().Metadata
    except ImportError:
        Metadata = None
    except Exception as exc:  # kernels does not import here, e.g. with a malformed HF_ENDPOINT
        Metadata = None
        problems.append(Problem("metadata.loader", f"the kernels loader cannot be imported: {exc}"))
    if Metadata is not None:
        try:
            Metadata.read_from_file(built.path / METADATA)
        except Exception as exc:  # the loader's own parser is the judge
            problems.append(Problem("metadata.rejected", f"metadata.json: rejected by the kernels loader: {exc}"))
    prov = meta.provenance
    commits = {"kernel-builder": prov.kernel_builder.commit if prov else None,
               "kernel": prov.kernel.commit if prov and prov.kernel else None}
    for part, commit in commits.items():
        if commit is not None and not HEX_COMMIT.match(commit):
            problems.append(Problem("metadata.provenance", f"metadata.json: provenance.{part}.commit "
                                                              f"{commit!r} is not a full hex id"))
    local = prov.local_build if prov else None
    if local:
        caps = ", ".join(local.cuda_capabilities) or "this machine"
        problems.append(Problem(LOCAL_BUILD, f"metadata.json: a local build for CUDA "
                                f"capabilities {caps} only (--cuda-capabilities); build without "
                                "it to publish"))
    split = prov.split_compile if prov else None
    if split and not local:  # a local build splits by default and is refused already
        problems.append(Problem(SPLIT_BUILD, f"metadata.json: its device code was compiled split "
                                f"in {split.parts} parts (KBUILD_NVCC_SPLIT), which can make "
                                "kernels slower; build without it to publish"))
    compiled = parsed is None or not parsed.is_noarch
    if compiled and meta.backend.type.needs.archs_key and not meta.backend.archs:
        problems.append(Problem("metadata.archs", "metadata.json: backend.archs is empty"))
    return problems


def digest_problems(built: BuiltVariant) -> list[Problem]:
    digest = built.metadata.digest
    if digest is None:
        return [Problem("digest.missing", "metadata.json: no `digest`")]
    if digest.algorithm != "sha256":
        return [Problem("digest.algorithm", "metadata.json: unsupported digest algorithm "
                        f"{digest.algorithm!r}")]
    expected, actual = digest.files, built.digest()
    problems = [Problem("digest.file-missing", f"digest: {p} is missing")
                for p in sorted(expected.keys() - actual.keys())]
    problems += [Problem("digest.file-extra", f"digest: {p} is not in the digest")
                 for p in sorted(actual.keys() - expected.keys())]
    problems += [Problem("digest.file-changed", f"digest: {p} has changed since the build")
                 for p in sorted(expected.keys() & actual.keys()) if expected[p] != actual[p]]
    return problems


def signature_problems(built: BuiltVariant) -> list[Problem]:
    """An unsigned variant is fine; a signature the loader would refuse is not."""
    state = signature_state(built.path)
    code = {INVALID: SIGNATURE_INVALID, STALE: SIGNATURE_STALE}.get(state.status)
    if code is None:
        return []
    advice = "; sign again (`kbuild sign`) or remove it" if code == SIGNATURE_STALE else ""
    return [Problem(code, f"signature: metadata.json.sigstore {state.reason}{advice}")]


def layout_problems(built: BuiltVariant) -> list[Problem]:
    problems: list[Problem] = []
    variant, meta = built.path, built.metadata
    try:
        parsed = Variant.parse(variant.name)
    except VariantError as e:
        return [Problem("layout.name", f"layout: folder {variant.name}: {e.reason}")]
    for required in ("__init__.py", "_ops.py"):
        if not (variant / required).is_file():
            problems.append(Problem("layout.missing", f"layout: {required} is missing"))
    for p in sorted(variant.rglob("*")):
        rel = p.relative_to(variant)
        if p.name == "__pycache__" or "__pycache__" in rel.parts:
            problems.append(Problem(BYTECODE, f"layout: {rel} must not be shipped"))
        elif p.suffix == ".pyc":
            problems.append(Problem("layout.pyc", f"layout: {rel} is bytecode without its source"
                                    " (it would be imported, and it does not ship)"))
    sos = sorted(variant.glob("*.so"))
    kid = meta.id
    if parsed.is_noarch:
        problems += [Problem("layout.so", f"layout: noarch variant contains {s.name}") for s in sos]
    elif [s.name for s in sos] != [f"{kid}.abi3.so"]:
        problems.append(Problem("layout.so", f"layout: expected exactly {kid}.abi3.so, "
                                            f"found {[s.name for s in sos]}"))
    if meta.backend.type != parsed.backend:
        problems.append(Problem("layout.backend", f"layout: folder {variant.name} is a "
                                f"{parsed.backend or parsed.compute} variant but metadata says {meta.backend.type!r}"))
    name = meta.name
    if kid and not kid.startswith(f"_{name.replace('-', '_')}_"):
        problems.append(Problem("metadata.id", f"metadata.json: id {kid!r} does not start with "
                                             f"_{name.replace('-', '_')}_"))
    return problems


def absolute_imports(source: str, package: str) -> list[tuple[int, str, str]]:
    """(line, statement, the relative form) for each import of `package` by its own name in
    `source` (not those under `if TYPE_CHECKING:`, which never run)."""
    import ast
    found: list[tuple[int, str, str]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                visit(ast.Module(body=child.orelse, type_ignores=[]))  # the else branch runs
                continue
            if isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name == package or alias.name.startswith(package + "."):
                        head, _, last = alias.name[len(package) + 1:].rpartition(".")
                        relative = (f"from .{head} import {last}" if last else
                                    "from . import NAME") + (f" as {alias.asname}" if alias.asname
                                                            and alias.asname != last else "")
                        found.append((child.lineno, ast.unparse(child), relative))
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module and (
                    child.module == package or child.module.startswith(package + ".")):
                rest = child.module[len(package):]
                relative = ast.unparse(ast.ImportFrom(module=rest.lstrip(".") or None,
                                                      names=child.names, level=1))
                found.append((child.lineno, ast.unparse(child), relative))
            visit(child)

    try:
        visit(ast.parse(source))
    except SyntaxError:
        return []  # the load reports it
    return found


def import_problems(built: BuiltVariant) -> list[Problem]:
    """Imports of the kernel's own package by name: the loader imports the variant under a name
    of its own (e.g. `relu_1a2b3c4d`), so `from relu.x import y` fails there (or imports
    another copy); the relative form works wherever it is loaded."""
    package = built.metadata.name.replace("-", "_")
    problems: list[Problem] = []
    for path in sorted(built.path.rglob("*.py")):
        rel = path.relative_to(built.path)
        if "__pycache__" in rel.parts:
            continue
        try:
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for line, statement, relative in absolute_imports(source, package):
            problems.append(Problem("imports.absolute", f"imports: {rel}:{line}: `{statement}` "
                                    f"imports the kernel's own package by name, which the loader "
                                    f"renames; write `{relative}`"))
    return problems


def name_problems(built: BuiltVariant, so: Path) -> list[Problem]:
    """The folder's name against the variant its binary was built as (recorded by this builder
    in the `.so`; binaries without the record are not judged): `kernels` picks a folder by its
    name, so a renamed one would be loaded by a torch it was not built for."""
    built_as = binary.built_as(so)
    if built_as is None or built_as == built.name:
        return []
    return [Problem("layout.name-binary", f"layout: folder {built.name} holds {so.name}, built as "
                    f"{built_as}; kernels would load it as {built.name}")]


def variant_code_problems(built: BuiltVariant, so: Path) -> list[Problem]:
    parsed = _parsed(built)
    if parsed is None or parsed.backend is None:
        return []
    return code_problems(so, parsed.backend, built.metadata.backend.archs or [],
                         parsed.framework == "torch-stable-abi")


PROBE_MARKER = "KBUILD-PROBE "  # as resources/scripts/probe_variant.py answers
VOLATILE_ENV = {"PYTEST_CURRENT_TEST"}  # changes with every test, means nothing to a load
PROBE_TIMEOUT_VAR, PROBE_TIMEOUT = "KBUILD_PROBE_TIMEOUT", 300.0  # seconds for one variant's load


def probe_timeout() -> float:
    """The time one load may take (KBUILD_PROBE_TIMEOUT seconds, else PROBE_TIMEOUT)."""
    value = os.environ.get(PROBE_TIMEOUT_VAR, "").strip()
    if not value:
        return PROBE_TIMEOUT
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds < float("inf"):
        raise BuildError(f"{PROBE_TIMEOUT_VAR}={value!r} is not a number of seconds",
                         key=PROBE_TIMEOUT_VAR, hint=f"e.g. {PROBE_TIMEOUT_VAR}=600, or unset it "
                                                      f"({PROBE_TIMEOUT:.0f} s)")
    return seconds


class Probers:
    """Interpreters that load variants with the real `kernels` loader, one per (python,
    environment) and at most `keep` at a time, each kept for further variants: torch and kernels
    are imported once for every variant a process checks (`kbuild check` of several variants, a
    test session). A variant id it loaded before, a failed load or a crash retires it, so every
    load happens in a process where nothing of that id was loaded. A load runs the variant's own
    code: its interpreter gets no secret of this environment (core/secrets.py), and a load that
    does not finish within `probe_timeout()` is stopped."""

    def __init__(self, keep: int = 2):
        self.keep = keep
        self.lock = threading.Lock()
        self.workers: dict[tuple, tuple[Worker, set[str]]] = {}

    def probe(self, variant: Path, python: str, kid: str) -> dict:
        timeout = probe_timeout()
        env = without_secrets()
        key = (python, tuple(sorted(i for i in env.items() if i[0] not in VOLATILE_ENV)))
        with self.lock:
            worker, loaded = self.workers.pop(key, (None, set()))
            if worker is not None and kid in loaded:
                worker.close()
                worker, loaded = None, set()
            if worker is None:
                while len(self.workers) >= self.keep:
                    self.workers.pop(next(iter(self.workers)))[0].close()
                script = resources.files("kbuild") / "resources" / "scripts" / "probe_variant.py"
                worker = Worker([python, str(script)], PROBE_MARKER, env=env)
            result = worker.ask_json(str(variant), timeout=timeout)
            if result is None and worker.timed_out:
                result = {"loadable": False, "timed_out": True,
                          "reason": f"the load of {variant.name} did not finish in {timeout:g} s; "
                                    f"stopped it (its import hangs? {PROBE_TIMEOUT_VAR} sets the "
                                    "time)"}
            elif result is None:
                result = {"loadable": False, "reason": f"probe crashed: {worker.errors()}",
                          "crashed": True}
            if result["loadable"] or result.get("skipped"):
                self.workers[key] = (worker, loaded | {kid})
            else:
                worker.close()
            return result

    def close(self) -> None:
        with self.lock:
            for worker, _ in self.workers.values():
                worker.close()
            self.workers.clear()


PROBERS = Probers()
atexit.register(PROBERS.close)


def probe_load(variant: Path, python: str | None, kid: str) -> dict:
    """Loads `variant` with the real `kernels` in `python`, unless these very files loaded there
    before and what that load depended on is unchanged (stages/check/probe_memo.py: successes only, a
    failure is loaded again every time)."""
    python = python or sys.executable
    before = probe_memo.snapshot(variant)
    memo_key = probe_memo.key(variant, python)
    memo = probe_memo.recall(memo_key)
    if memo is not None:
        return {"loadable": True, "reason": "", **memo, "remembered": True}
    result = PROBERS.probe(variant, python, kid)
    if result["loadable"]:
        probe_memo.remember(memo_key, before, variant, result["ops"], result.get("files", []),
                            result.get("api"))
    return result


def check_variant(variant: Path, *, python: str | None = None, load: bool = True) -> CheckReport:
    """The report of the variant folder `variant`, readable or not."""
    built, unreadable = BuiltVariant.read(variant)
    if built is None:  # missing, not JSON, or of the wrong shape: the checks read it
        return CheckReport(variant.name, [Problem(p.code, p.message) for p in unreadable])
    return check_built(built, python=python, load=load)


def check_built(built: BuiltVariant, *, python: str | None = None, load: bool = True) -> CheckReport:
    report = CheckReport(built.name)
    report.problems += metadata_problems(built)
    report.problems += digest_problems(built)
    report.problems += layout_problems(built)
    report.problems += import_problems(built)
    report.problems += signature_problems(built)
    for so in sorted(built.path.rglob("*.so")):
        report.problems += abi_problems(so)
        report.problems += variant_code_problems(built, so)
        report.problems += name_problems(built, so)
    # Bytecode does not ship and the load does not read it, a local (or split) build is loaded
    # to be used here, and the load does not read the signature: none excuses the load.
    if load and all(p.code in (BYTECODE, LOCAL_BUILD, SPLIT_BUILD, *SIGNATURE_CODES)
                    for p in report.problems):
        result = probe_load(built.path, python, built.metadata.id or "")
        if result["loadable"]:
            report.loaded = True
            before = " (these files, this interpreter: remembered)" if result.get("remembered") else ""
            report.notes.append(f"loaded by kernels{before}; ops: {', '.join(result['ops']) or 'none'}")
        elif result.get("skipped"):
            report.notes.append(f"not loadable on this machine: {result['reason']}")
        else:
            report.loaded = False
            report.problems.append(Problem("load.failed", f"load: {result['reason']}"))
    return report

