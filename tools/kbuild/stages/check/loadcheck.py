"""After linking: load the new extension in the target interpreter, so a registration torch
rejects (an op schema that does not match its C++ function, an op defined twice) fails the
build with torch's own message instead of aborting the user's Python later."""

from __future__ import annotations

import hashlib
import re
import signal
from importlib import resources
from pathlib import Path

from ...core.errors import BuildError
from ...core.runner import Worker
from ...core import deps
from ..plan import VariantPlan

SCRIPT = resources.files("kbuild") / "resources" / "scripts" / "load_registrations.py"
MARKER = "KBUILD-LOAD "
MAX_LINES = 12
STAMP = "loaded.sha256"  # in the variant's work dir: the .so (and interpreter) that loaded
REGISTERED_AT = re.compile(r"registered at (\S+?):(\d+)")


def registration_error(stderr: str) -> str | None:
    """The first lines of the c10::Error (or other C++ exception) that aborted a process, from
    its stderr; None when there is none."""
    lines = stderr.splitlines()
    for i, line in enumerate(lines):
        if "what():" not in line:
            continue
        text = [line.split("what():", 1)[1].strip()]
        for more in lines[i + 1:]:
            if (not more.strip() or more.startswith(("Exception raised from", "frame #"))
                    or "Fatal Python error" in more):
                break
            text.append(more.rstrip())
        return "\n".join(text[:MAX_LINES])
    return None


def crash_summary(returncode: int, stderr: str) -> str:
    """What to tell the user about a probe process that died."""
    found = registration_error(stderr)
    if found:
        return found
    try:
        how = f"killed by {signal.Signals(-returncode).name}" if returncode < 0 else f"exit {returncode}"
    except ValueError:
        how = f"exit {returncode}"
    tail = [ln for ln in stderr.splitlines() if ln.strip() and not ln.startswith("frame #")]
    return f"the process crashed ({how})" + ("\n" + "\n".join(tail[:MAX_LINES]) if tail else "")


class Loader:
    """The target interpreter with torch's C++ libraries loaded, waiting for one extension:
    started before compiling, so the check after linking costs only the extension's own load."""

    def __init__(self, python: str, torch_lib_dir: str):
        self.worker = Worker([python, str(SCRIPT), torch_lib_dir], MARKER)

    def load(self, so: Path) -> str | None:
        """None when `so` loads, else what went wrong (torch's text). Once per Loader."""
        result = self.worker.ask_json(str(so))
        if result is None:
            return crash_summary(self.worker.proc.wait(), self.worker.errors(chars=None))
        return None if result.get("ok") else result.get("error", "unknown error")

    def close(self) -> None:
        self.worker.kill()

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def probe(so: Path, python: str, torch_lib_dir: str, loader: Loader | None = None) -> str | None:
    """Loads `so` in `python` (in `loader`, when one was started for it); None when it loads,
    else what went wrong (torch's text)."""
    loader = loader or Loader(python, torch_lib_dir)
    try:
        return loader.load(so)
    finally:
        loader.close()


def binding_location(plan: VariantPlan, message: str) -> str:
    """The binding file (and line) the message points at, else the torch source holding
    TORCH_LIBRARY_EXPAND, else the first torch source."""
    project = plan.project
    m = REGISTERED_AT.search(message)
    if m and (project / m.group(1)).is_file():
        return f"{project / m.group(1)}:{m.group(2)}"
    sources = list(plan.manifest.torch.src) if plan.manifest.torch else []
    for rel in sources:
        path = project / rel
        try:
            if "TORCH_LIBRARY" in path.read_text(encoding="utf-8", errors="replace"):
                return str(path)
        except OSError:
            continue
    return str(project / sources[0]) if sources else str(project)


def _stamp(so: Path, python: str, torch_version: str = "") -> str:
    return hashlib.sha256(so.read_bytes() + b"\0" + python.encode() + b"\0"
                          + torch_version.encode()).hexdigest()


def _remembered(key: str) -> Path | None:
    """Where the user's cache remembers that the `.so` of `key` loaded (a file named after the
    sha256 of the `.so`, the interpreter and its torch), if that cache is safe to trust."""
    return deps.memo_file("loaded", key)


def loaded_before(plan: VariantPlan, so: Path, work: Path) -> bool:
    """Whether this very `.so` already loaded in this interpreter (with this torch): in this
    work dir, or, for a byte-identical `.so` built elsewhere (a rebuild after `kbuild clean`,
    another copy of the project), in the user's cache."""
    key = _stamp(so, plan.torch.python, plan.torch.torch_version)
    stamp = work / STAMP
    if stamp.is_file() and stamp.read_text().strip() == key:
        return True
    return deps.read_memo(_remembered(key)) is not None


def check_loads(plan: VariantPlan, so: Path, work: Path, loader: Loader | None = None) -> None:
    """Raises BuildError with torch's message when `so` does not load; once per new `.so`."""
    if loaded_before(plan, so, work):
        return
    stamp = work / STAMP
    key = _stamp(so, plan.torch.python, plan.torch.torch_version)
    problem = probe(so, plan.torch.python, plan.torch.lib_dir, loader)
    if problem is None:
        stamp.write_text(key + "\n")
        deps.write_memo(_remembered(key))
        return
    stamp.unlink(missing_ok=True)
    if "schema" in problem:
        hint = "make the schema in `ops.def(...)` and the C++ function's parameters agree"
    elif "undefined symbol" in problem:
        hint = "define that function in a kernel linked into this variant, or stop using it"
    else:
        hint = "fix the operator registrations of the binding"
    raise BuildError("the built extension does not load; torch says:\n    "
                     + problem.replace("\n", "\n    "),
                     file=binding_location(plan, problem), hint=hint)
