"""The binding's precompiled torch header (GCC), made once per environment and flags.

A binding's translation unit spends most of its time parsing <torch/library.h> (about 7.5 s of
10 s on 2 cores, 5 of 7 s on 16). The binding's C++ sources are compiled with
`-include torch_pch.h` (which includes <torch/library.h>); when a precompiled form of it made
for this compiler, these flags and these headers exists, GCC reads that instead.

- When: GCC; compiler cache none or ccache (ccache hashes the `.gch`; sccache does not, and
  would reuse objects built against another one: mozilla/sccache#2562); not a stable-ABI build;
  $KBUILD_PCH not `off`; each C++ binding source's first directive includes a torch header
  (<torch/...>, <ATen/...>, <c10/...>) and it includes <torch/library.h> (or all.h, torch.h,
  extension.h) itself. Then the forced include only moves torch's own headers first.
- Made: with the binding's compile line from CMake's compile_commands.json, less what belongs to
  the project (its -I folders, TORCH_EXTENSION_NAME, the prefix maps of the project and build
  folders, dependency and output options), so other projects on the same environment share it.
  Kept in $KBUILD_CACHE_DIR/pch/<key>/, the key a hash of that line and the compiler's identity,
  with the size, mtime and sha256 of every file GCC read for it and the header's own sha256, and
  `torch_pch.h.gch.sum`: ccache hashes that file instead of the ~250 MB header
  (pch_external_checksum), so a compiler-cache hit of the binding takes 0.01 s, not 0.8 s. The
  sum is the sha256 of what the header was made from (its text and the content of every file
  GCC read), not of its bytes: GCC's header holds the folder it was made in and values of the
  process that made it, so the same headers made again give other bytes but the same sum, and
  the binding's compiler-cache entries keep matching.
- Used: only when the header is still the bytes it was made as (its sha256, checked whenever
  its inode, size, mtime or status-change time moved), every one of those files is unchanged,
  and no folder of the project's include
  path holds a file that would have been found instead of one of torch's. Otherwise, or while
  none exists, the binding compiles from source as before, and the header is made beside the
  build (in parallel) for the next one. GCC itself refuses a `.gch` of other options
  (-Winvalid-pch says so in the build log) and then reads the header as text: never wrong.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from ...core.errors import BuildError
from ...core.runner import Process, capture, spawn_logged, stop
from ...core.switches import switch
from ...core import deps
from ..plan import VariantPlan

PCH_VAR = "KBUILD_PCH"
HEADER = "torch_pch.h"
SUM = f"{HEADER}.gch.sum"  # read by ccache in place of the header (pch_external_checksum)
CXX_SUFFIXES = (".cc", ".cpp", ".cxx")
COMPILED_S = 1.0  # a binding step this long compiled (a compiler-cache hit takes a fraction)
KEEP = 6  # precompiled headers kept (least recently used go first); each is ~250 MB
_FIRST_DIRECTIVE = re.compile(r"^\s*#\s*(\w+)\s*(.*)$")
_TORCH_HEADER = re.compile(r"^[<\"](torch|ATen|c10)/")
_REGISTRATION = re.compile(r"^\s*#\s*include\s*<torch/(library|all|torch|extension)\.h>", re.M)


@dataclass(frozen=True)
class Outcome:
    """What the binding's precompiled header did in one build (one line after the build)."""
    state: str  # used | made | off | failed
    detail: str = ""

    def __str__(self) -> str:
        text = {"used": "used", "made": "made for the next builds", "off": "not used",
                "failed": "could not be made"}[self.state]
        return f"precompiled torch header: {text}" + (f" ({self.detail})" if self.detail else "")


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def source_reason(path: Path) -> str | None:
    """Why `path` cannot take the forced include (None: it can)."""
    try:
        text = _strip_comments(path.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return f"{path.name} cannot be read"
    for line in text.splitlines():
        if not line.strip():
            continue
        m = _FIRST_DIRECTIVE.match(line)
        if not m:
            return f"{path.name} has code before its first #include"
        if m.group(1) == "pragma" and m.group(2).strip() == "once":
            continue
        if m.group(1) != "include" or not _TORCH_HEADER.match(m.group(2).strip()):
            return f"{path.name} does not start with a torch #include"
        break
    if not _REGISTRATION.search(text):
        return f"{path.name} does not include <torch/library.h>"
    return None


def _is_gcc(cxx: str) -> bool:
    out = capture([cxx, "--version"], timeout=30).stdout
    return "clang" not in out.lower() and ("gcc" in out.lower() or "g++" in out.lower()
                                           or "free software foundation" in out.lower())


def off_reason(plan: VariantPlan, cxx: str, launcher: str | None) -> str | None:
    """Why this build compiles its binding without the precompiled header (None: it uses it)."""
    if not switch(PCH_VAR):
        return f"{PCH_VAR}=off"
    if launcher and "sccache" in Path(launcher).name:
        return "sccache does not key on it"
    if plan.stable_abi:
        return "stable-ABI binding"
    sources = binding_cxx_sources(plan)
    if not sources:
        return "no C++ binding source"
    for src in sources:
        reason = source_reason(src)
        if reason:
            return reason
    if not _is_gcc(cxx):
        return "not GCC"
    return None


def binding_cxx_sources(plan: VariantPlan) -> list[Path]:
    return [plan.project / s for s in plan.manifest.torch.src if s.endswith(CXX_SUFFIXES)]


# --- the compile line, and what of it the header depends on --------------------------------------

def binding_command(build: Path, source: Path) -> tuple[list[str], Path] | None:
    """The compile line CMake wrote for `source` (from compile_commands.json), and its folder."""
    try:
        entries = json.loads((build / "compile_commands.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    want = os.path.realpath(source)
    for e in entries:
        if os.path.realpath(Path(e.get("directory", "")) / e.get("file", "")) == want:
            return shlex.split(e["command"]), Path(e["directory"])
    return None


_WITH_VALUE = ("-o", "-MT", "-MF", "-MQ", "-include", "-I", "-isystem", "-iquote", "-idirafter",
               "-x", "-D", "-U")
_DROPPED = ("-o", "-MT", "-MF", "-MQ", "-include", "-I")


def header_flags(argv: list[str], launcher: str | None, project_dirs: list[str]
                 ) -> tuple[list[str], list[str]]:
    """The compile line less the project's parts: (compiler + flags, the project's -I folders).
    Kept: what shapes torch's headers (defines, -isystem folders, language and code options,
    the prefix maps of folders other than the project's)."""
    args = list(argv)
    if launcher and args and os.path.realpath(args[0]) == os.path.realpath(launcher):
        args = args[1:]
    own = {os.path.realpath(d) for d in project_dirs}
    out, includes, i = [args[0]], [], 1
    while i < len(args):
        a = args[i]
        if a in _WITH_VALUE and i + 1 < len(args):
            if a == "-I":
                includes.append(args[i + 1])
            if a not in _DROPPED and not (a == "-D" and args[i + 1].startswith("TORCH_EXTENSION_NAME=")):
                out += [a, args[i + 1]]
            i += 2
            continue
        i += 1
        if a.startswith("-I"):
            includes.append(a[2:])
        elif a in ("-c", "-MD", "-MMD", "-Winvalid-pch", "-fpch-preprocess") or not a.startswith("-"):
            continue  # dependency and output options, ours, the source
        elif a.startswith("-DTORCH_EXTENSION_NAME="):
            continue
        elif a.startswith(("-ffile-prefix-map=", "-fmacro-prefix-map=", "-fdebug-prefix-map=")):
            old = a.split("=", 1)[1].rsplit("=", 1)[0]
            if not old.startswith(".") and os.path.realpath(old) not in own:
                out.append(a)
        else:
            out.append(a)
    return out, includes


def _stamp(path: str) -> list | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [path, st.st_size, st.st_mtime_ns]


def _file_stamp(path: Path) -> list | None:
    """What a replacement or a rewrite of a file changes: inode, size, mtime, status-change time."""
    try:
        st = path.stat()
    except OSError:
        return None
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def made_from(files: list[list]) -> str:
    """The header's sum: sha256 of its text and of the content of every file GCC read."""
    read = sorted([path, digest] for path, _, _, digest in files)
    return hashlib.sha256(json.dumps([header_text(), read]).encode()).hexdigest()


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def key_of(flags: list[str]) -> str:
    compiler = shutil.which(flags[0]) or flags[0]
    ident = [_stamp(os.path.realpath(compiler)), flags[1:], header_text()]
    return hashlib.sha256(json.dumps(ident).encode()).hexdigest()[:24]


def header_text() -> str:
    from ..generate import template
    return template(HEADER)


def read_depfile(path: Path) -> list[str]:
    """The prerequisites of a Make-style depfile (GCC's -MD output)."""
    text = path.read_text(encoding="utf-8", errors="replace").replace("\\\n", " ")
    _, _, rest = text.partition(": ")
    names, cur, i = [], "", 0
    while i < len(rest):
        ch = rest[i]
        if ch == "\\" and i + 1 < len(rest) and rest[i + 1] in " #":
            cur += rest[i + 1]
            i += 2
            continue
        if ch.isspace():
            if cur:
                names.append(cur)
            cur = ""
        else:
            cur += ch
        i += 1
    if cur:
        names.append(cur)
    return names


WHAT = "the precompiled-header cache"


def store() -> Path:
    """$KBUILD_CACHE_DIR/pch, once only you (or root) can change it and the folders above it."""
    return deps.trusted_base(deps.cache_root(), "pch", WHAT)


def _record(entry: Path) -> dict | None:
    for path in (entry, entry / f"{HEADER}.gch", entry / SUM, entry / "stamps.json"):
        try:
            if deps.unsafe_reason(path.lstat()):
                return None
        except OSError:
            return None
    try:
        record = json.loads((entry / "stamps.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if (entry / f"{HEADER}.gch").is_file() and "files" in record else None


def stale(entry: Path) -> str | None:
    """Why the header in `entry` no longer matches its files (None: it does). A file with another
    mtime but the same content (an environment realised again from its lock) still matches."""
    record = _record(entry)
    if record is None:
        return "incomplete"
    header = entry / f"{HEADER}.gch"
    if _file_stamp(header) != record.get("header") and _sha256(str(header)) != record.get("sha256"):
        return f"{header} is not the header that was made"  # replaced behind its sum
    for path, size, mtime, digest in record["files"]:
        now = _stamp(path)
        if now is None or now[1] != size:
            return f"{path} changed since it was made"
        if now[2] != mtime and _sha256(path) != digest:
            return f"{path} changed since it was made"
    return None


def shadowed(entry: Path, project_includes: list[str]) -> str | None:
    """A project file the binding would read instead of one of torch's in the header (or None)."""
    record = _record(entry) or {}
    roots = [r.rstrip("/") + "/" for r in record.get("system_includes", [])]
    for path, *_ in record.get("files", []):
        root = next((r for r in roots if path.startswith(r)), None)
        if root is None:
            continue
        rel = path[len(root):]
        for d in project_includes:
            if os.path.isfile(os.path.join(d, rel)):
                return f"{os.path.join(d, rel)} would be read instead of torch's {rel}"
    return None


def _system_includes(flags: list[str]) -> list[str]:
    out = []
    for i, a in enumerate(flags):
        if a == "-isystem" and i + 1 < len(flags):
            out.append(os.path.realpath(flags[i + 1]))
        elif a.startswith("-isystem") and len(a) > len("-isystem"):
            out.append(os.path.realpath(a[len("-isystem"):]))
    return out


@dataclass
class Maker:
    """A precompiled header being made beside the build."""
    proc: Process
    tmp: Path
    entry: Path
    started: float
    system_includes: list[str]
    failure_log: Path
    binding_object: str  # Ninja's name for the binding's object (as in .ninja_log)

    def finish(self) -> Outcome:
        try:
            return self._finish()
        except BaseException:  # interrupted or terminated: nothing half-made is left
            self.cancel()
            raise

    def _finish(self) -> Outcome:
        code = self.proc.wait()
        seconds = time.monotonic() - self.started
        header = self.tmp / f"{HEADER}.gch"
        if code != 0 or not header.is_file():
            shutil.copyfile(self.tmp / "make.log", self.failure_log)
            shutil.rmtree(self.tmp, ignore_errors=True)
            return Outcome("failed", f"exit {code}; see {self.failure_log}")
        files = [os.path.realpath(p) for p in read_depfile(self.tmp / "deps.d")]
        files = [f for f in files if not f.startswith(str(self.tmp) + "/")]
        stamps = [[*st, _sha256(st[0])] for st in map(_stamp, files) if st]
        record = {"files": stamps, "system_includes": self.system_includes,
                  "header": _file_stamp(header), "sha256": _sha256(str(header))}
        try:
            (self.tmp / "stamps.json").write_text(json.dumps(record), encoding="utf-8")
            (self.tmp / SUM).write_text(made_from(stamps) + "\n", encoding="utf-8")
        except OSError as e:  # a full disk: nothing half-made is kept
            _discard(self.tmp)
            return Outcome("failed", deps.unwritable(WHAT, self.tmp.parent, e))
        (self.tmp / "deps.d").unlink(missing_ok=True)
        try:  # a whole folder renamed into place, not core/files.write_atomic's one file
            os.rename(self.tmp, self.entry)
        except OSError:  # made by another build meanwhile
            shutil.rmtree(self.tmp, ignore_errors=True)
        deps.prune_entries(self.entry.parent, KEEP)
        return Outcome("made", f"{seconds:.1f}s")

    def settle(self, steps: list[tuple[str, float]]) -> Outcome:
        """After the build: finish it when the binding really compiled (the next compile of it
        gains), else stop it (the compiler cache had the binding: waiting would only cost)."""
        took = dict(steps).get(self.binding_object)
        if took is not None and took >= COMPILED_S:
            return self.finish()
        self.cancel()
        return Outcome("off", "the binding did not compile" if took is None else
                       "the binding came from the compiler cache; made when it compiles")

    def cancel(self) -> None:
        stop([self.proc], grace=2)
        _discard(self.tmp)


def _discard(tmp: Path) -> None:
    """Removes a half-made entry; a compiler of its stopped group may still write one last file."""
    for _ in range(20):
        shutil.rmtree(tmp, ignore_errors=True)
        if not tmp.exists():
            return
        time.sleep(0.05)


def _output(argv: list[str]) -> str:
    return next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "-o"), "")


def binding_outdated(build: Path, argv: list[str], ninja: str) -> bool:
    """Whether Ninja would compile the binding now (a dry run)."""
    if not _output(argv):
        return True
    proc = capture([ninja, "-C", str(build), "-n", _output(argv)], timeout=60)
    return proc.returncode != 0 or "no work to do" not in proc.stdout


def prepare(plan: VariantPlan, work: Path, build: Path, launcher: str | None, ninja: str
            ) -> tuple[Outcome | None, Maker | None]:
    """Before Ninja runs: links a valid precompiled header next to `work/torch_pch.h` (and says
    "used"), or removes a stale link and starts making one (returns its Maker)."""
    link, sum_link = work / f"{HEADER}.gch", work / SUM
    for old in (link, sum_link):
        if old.is_symlink() or old.exists():
            old.unlink()
    found = binding_command(build, binding_cxx_sources(plan)[0])
    if found is None:
        return Outcome("off", "no compile line for the binding"), None
    argv, directory = found
    project_dirs = [str(plan.project), str(build), str(work)]
    flags, includes = header_flags(argv, launcher, project_dirs)
    includes = [os.path.realpath(directory / d) for d in includes]
    key = key_of(flags)
    try:
        root = store()
    except BuildError as e:  # read-only, not writable, unsafe: the binding compiles without it
        return Outcome("off", deps.without_cache(e.message)), None
    entry = root / key
    if entry.is_dir() and stale(entry):
        shutil.rmtree(entry, ignore_errors=True)
    if entry.is_dir():
        why = shadowed(entry, includes)
        if why:
            return Outcome("off", why), None
        os.utime(entry)
        link.symlink_to(entry / f"{HEADER}.gch")
        sum_link.symlink_to(entry / SUM)
        return Outcome("used", key[:12]), None
    if not binding_outdated(build, argv, ninja):
        return None, None  # nothing to compile: make it when the binding next compiles
    deps.remove_abandoned(root)
    tmp = root / f"{key}.tmp{os.getpid()}"
    proc = None
    try:  # a signal from here on stops what was started and removes the folder
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        (tmp / HEADER).write_text(header_text(), encoding="utf-8")
        cmd = flags + ["-x", "c++-header", str(tmp / HEADER), "-o", str(tmp / f"{HEADER}.gch"),
                       "-MD", "-MF", str(tmp / "deps.d")]
        proc = spawn_logged(cmd, tmp / "make.log", cwd=directory)
        return None, Maker(proc, tmp, entry, time.monotonic(), _system_includes(flags),
                           work / "pch-make.log", _output(argv))
    except BaseException as e:
        if proc is not None:
            stop([proc], grace=2)
        _discard(tmp)
        if isinstance(e, OSError):  # a full cache: the binding compiles without it
            return Outcome("off", deps.unwritable(WHAT, root, e)), None
        raise
