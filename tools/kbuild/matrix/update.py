"""`kbuild matrix update`: torch releases newer than the matrix, read from a package index, added
to pixi.toml in the file's own style.

The index speaks the simple repository API (PEP 691 JSON, or PEP 503 HTML). On the PyTorch index
(`https://download.pytorch.org/whl`) a release's wheels carry their flavour as a local label
(`2.15.0+cu130`), so every CUDA version it ships is seen; on PyPI only the default wheel exists,
and its CUDA version is read from its core metadata (PEP 658: the `cuda-toolkit` or
`nvidia-cuda-runtime` requirement). A newer minor release gets environments (torch feature per
flavour, toolkit features for new CUDA versions, an environment each); a newer patch release of a
minor already in the matrix moves that minor's pins.
"""

from __future__ import annotations

import contextlib
import difflib
import http.client
import re
import socket
import threading
import tomllib
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from email.parser import Parser
from html.parser import HTMLParser
from pathlib import Path
from typing import Callable
from urllib.parse import urljoin, urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError

from ..core.errors import BuildError
from ..core.runner import capture
from .matrix import Matrix, _parse

ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"
PLATFORM_OF_TAG = {"x86_64": "linux-64", "aarch64": "linux-aarch64"}
RUNTIME_PACKAGES = ("cuda-toolkit", "nvidia-cuda-runtime", "nvidia-cuda-runtime-cu12",
                    "nvidia-cuda-runtime-cu11")


@dataclass
class Release:
    version: Version
    computes: dict[str, set[str]] = field(default_factory=dict)  # "cu130" -> {"linux-64", ...}


@dataclass
class Changes:
    text: str                                          # the new pixi.toml
    added: list[str] = field(default_factory=list)     # environment names
    bumped: list[str] = field(default_factory=list)    # "2.14.1 -> 2.14.2"

    def diff(self, old: str, name: str) -> str:
        return "".join(difflib.unified_diff(old.splitlines(True), self.text.splitlines(True),
                                            f"a/{name}", f"b/{name}"))


# --- reading the index ---------------------------------------------------------------------------
# An index is not trusted: only http(s) is read (no file:, ftp:, data:; redirects too), each request
# has one deadline for all of it (a server trickling bytes is cut off) and a size cap, and every
# answer is validated (its JSON by a model) before anything is read from it.

MAX_ANSWER = 64 * 1024 * 1024     # bytes: PyPI's torch page is a few MB
MAX_FILENAME = 255                # a wheel's file name is a file name
WEB = ("http", "https")
# CUDA releases (major -> minors): a `+cuXYZ` label names one of these, or is not followed.
# Extend when NVIDIA publishes a toolkit.
CUDA_RELEASES = {11: range(0, 9), 12: (0, 1, 2, 3, 4, 5, 6, 8, 9), 13: (0, 1, 2)}


def cuda_of_label(label: str) -> str | None:
    """ "13.0" for `cu130`, "cpu" for `cpu`, None for anything else (`cu999`, `cu127`, `rocm6`)."""
    if label == "cpu":
        return label
    m = re.fullmatch(r"cu(1[1-9])(\d)", label)
    if m and int(m.group(2)) in CUDA_RELEASES.get(int(m.group(1)), ()):
        return f"{m.group(1)}.{m.group(2)}"
    return None


class _Shape(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class IndexFile(_Shape):
    filename: StrictStr
    url: StrictStr
    core_metadata: bool | dict[str, str] | None = Field(None, alias="core-metadata")
    dist_info_metadata: bool | dict[str, str] | None = Field(None, alias="dist-info-metadata")


class ProjectPage(_Shape):
    """A PEP 691 project page: what kbuild reads of it."""
    files: list[IndexFile]


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.files: list[dict] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "a" and a.get("href"):
            name = a["href"].split("#")[0].rstrip("/").rsplit("/", 1)[-1]
            meta = a.get("data-core-metadata") or a.get("data-dist-info-metadata")
            self.files.append({"filename": urllib.request.unquote(name), "url": a["href"],
                               "core-metadata": bool(meta) and meta != "false"})


def _web_only(url: str, index: str) -> str:
    if urlsplit(url).scheme not in WEB:
        raise BuildError(f"{index} answered with a link to {url[:200]!r}: only http(s) is read",
                         hint="check --index (a simple-API index such as https://pypi.org/simple)")
    return url


class _WebRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if urlsplit(newurl).scheme not in WEB:
            raise urllib.error.URLError(f"redirected to {newurl[:200]!r}: only http(s) is read")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _opener(sockets: list, expired: threading.Event) -> urllib.request.OpenerDirector:
    """http(s) only; the socket of every connection it makes is recorded once connected (so the
    deadline can cut it, even after urllib hands it to the response), and one connected after
    the deadline is cut at once."""
    def tracked(cls):
        class Tracked(cls):
            def connect(self):
                super().connect()
                sockets.append(self.sock)
                if expired.is_set():
                    _cut(self.sock)
        return Tracked

    class Http(urllib.request.HTTPHandler):
        def http_open(self, req):
            return self.do_open(tracked(http.client.HTTPConnection), req)

    class Https(urllib.request.HTTPSHandler):
        def https_open(self, req):
            return self.do_open(tracked(http.client.HTTPSConnection), req, context=self._context)

    opener = urllib.request.OpenerDirector()
    for handler in (urllib.request.ProxyHandler(), Http(), Https(), _WebRedirects(),
                    urllib.request.HTTPDefaultErrorHandler(), urllib.request.HTTPErrorProcessor()):
        opener.add_handler(handler)
    return opener


def _cut(sock: socket.socket) -> None:
    """Ends a connection's reads and writes now, from any thread (TLS state left alone)."""
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


def _get(url: str, timeout: float, limit: int = MAX_ANSWER) -> tuple[bytes, str]:
    """The body and Content-Type at `url` (http or https), read within `timeout` seconds in all."""
    hint = "check --index (a simple-API index such as https://pypi.org/simple)"
    if urlsplit(url).scheme not in WEB:
        raise BuildError(f"cannot read {url[:200]}: only http(s) indexes are read", hint=hint)
    sockets: list = []
    expired = threading.Event()

    def cut() -> None:  # the deadline: unblock whatever read is waiting
        expired.set()
        for sock in list(sockets):
            _cut(sock)

    req = urllib.request.Request(url, headers={"Accept": ACCEPT, "User-Agent": "kbuild"})
    watchdog = threading.Timer(timeout, cut)
    watchdog.daemon = True
    watchdog.start()
    try:
        with _opener(sockets, expired).open(req, timeout=timeout) as resp:
            body = resp.read(limit + 1)
            ctype = resp.headers.get("Content-Type", "")
    except (OSError, http.client.HTTPException, ValueError) as e:
        if expired.is_set():
            raise BuildError(f"cannot read {url}: no complete answer within {timeout:g}s",
                             hint=hint) from None
        raise BuildError(f"cannot read {url}: {getattr(e, 'reason', None) or e}", hint=hint) from None
    finally:
        watchdog.cancel()
    if expired.is_set():
        raise BuildError(f"cannot read {url}: no complete answer within {timeout:g}s", hint=hint)
    if len(body) > limit:
        raise BuildError(f"cannot read {url}: the answer is larger than {limit // 2**20} MiB",
                         hint=hint)
    return body, ctype


def index_files(index: str, timeout: float = 60) -> list[dict]:
    """torch's files on `index`: [{filename, url, core-metadata}], URLs absolute (http(s) only)."""
    page = index.rstrip("/") + "/torch/"
    body, ctype = _get(page, timeout)
    if "json" in ctype:
        try:
            parsed = ProjectPage.model_validate_json(body)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "the answer"
            raise BuildError(f"{page} is not a simple-API project page ({where}: {first['msg']})",
                             hint="check --index (a simple-API index such as "
                                  "https://pypi.org/simple)") from None
        files = [{"filename": f.filename, "url": f.url,
                  "core-metadata": bool(f.core_metadata or f.dist_info_metadata)}
                 for f in parsed.files]
    else:
        parser = _Links()
        parser.feed(body.decode("utf-8", "replace"))
        files = parser.files
    for f in files:
        f["url"] = _web_only(urljoin(page, f["url"]).split("#")[0], page)
    return files


def _cuda_of_metadata(text: str) -> str | None:
    """The flavour a torch wheel's METADATA says: cuXY for the CUDA runtime it requires (a known
    CUDA release), "cpu" when it requires none, None when it names no CUDA release we know."""
    for line in Parser().parsestr(text).get_all("Requires-Dist") or []:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.name.lower() in RUNTIME_PACKAGES:
            for spec in req.specifier:
                m = re.match(r"(\d{1,3})\.(\d{1,3})", spec.version)
                if m and spec.operator in ("==", "~=", ">=", "==="):
                    label = f"cu{m.group(1)}{m.group(2)}"
                    return label if cuda_of_label(label) else None
    return "cpu"


def _wheel(filename: str):
    """(version, tags) of a wheel file name, None for anything else (or an absurd name)."""
    if len(filename) > MAX_FILENAME:
        return None
    try:
        _, version, _, tags = parse_wheel_filename(filename)
    except (InvalidWheelFilename, InvalidVersion, ValueError):  # ValueError: a 5000-digit number
        return None
    return version, tags


def releases(index: str, python: str, wanted: Callable[[Version], bool] = lambda v: True,
             resolver: Callable[[Version], str | None] | None = None, timeout: float = 60,
             unknown: list[str] | None = None) -> dict[Version, Release]:
    """Final torch releases on `index` with Linux wheels for `python` ("3.11"), by flavour (`cpu`
    or a known CUDA release). An unlabelled release that is `wanted` gets its flavour from its
    core metadata, else from `resolver`; one whose flavour can't be told goes to `unknown`."""
    tag = "cp" + python.replace(".", "")
    found: dict[Version, Release] = {}
    unlabelled: dict[Version, dict] = {}
    for f in index_files(index, timeout):
        parsed = _wheel(f["filename"])
        if parsed is None:
            continue
        version, tags = parsed
        if version.is_prerelease or version.is_devrelease:
            continue
        platforms = {PLATFORM_OF_TAG[arch] for t in tags for arch in PLATFORM_OF_TAG
                     if t.interpreter == tag and t.platform.startswith("manylinux")
                     and t.platform.endswith("_" + arch)}
        if not platforms:
            continue
        public = Version(version.public)
        release = found.setdefault(public, Release(public))
        if version.local:
            if cuda_of_label(version.local):
                release.computes.setdefault(version.local, set()).update(platforms)
        else:
            entry = unlabelled.setdefault(public, {"url": f["url"], "meta": False, "platforms": set()})
            entry["platforms"] |= platforms
            if f["core-metadata"] and not entry["meta"]:
                entry.update(url=f["url"], meta=True)
    for version, f in sorted(unlabelled.items()):
        if found[version].computes or not wanted(version):
            continue  # the labelled wheels say more, or nobody asks
        if f["meta"]:
            body, _ = _get(f["url"] + ".metadata", timeout, limit=1024 * 1024)
            compute = _cuda_of_metadata(body.decode("utf-8", "replace"))
        else:
            compute = resolver(version) if resolver else None
            compute = compute if compute and cuda_of_label(compute) else None
        if compute:
            found[version].computes.setdefault(compute, set()).update(f["platforms"])
        elif unknown is not None:
            unknown.append(str(version))
    return {v: r for v, r in found.items() if r.computes}


def newer_than(mx: Matrix) -> Callable[[Version], bool]:
    """Whether a torch release is newer than what the matrix pins (a new minor, or a new patch)."""
    pins: dict[tuple[int, int], Version] = {}
    for env in mx.envs:
        pins[(env.release.major, env.release.minor)] = Version(env.torch_version)
    latest = max(pins, default=(0, 0))

    def wanted(v: Version) -> bool:
        key = (v.major, v.minor)
        return v > pins[key] if key in pins else key > latest
    return wanted


def uv_resolver(inst, index: str, python: str) -> Callable[[Version], str | None]:
    """The flavour of PyPI's default wheel of a torch release, from what uv resolves it to
    (metadata only; this machine's install constraints don't apply to reading an index)."""
    from .envs import wheel_compute

    def resolve(version: Version) -> str | None:
        cmd = [inst.uv, "pip", "compile", "-", "--quiet", "--no-header", "--no-annotate", "--no-config",
               "--python-version", python, "--python-platform", "x86_64-manylinux_2_28",
               "--index-url", index]
        proc = capture(cmd, input=f"torch==={version}\n", env=inst._env(), timeout=300)
        if proc.returncode != 0:
            return None
        pins = {}
        for line in proc.stdout.splitlines():
            name, sep, pin = line.strip().partition("==")
            if sep:
                pins[name.split("[")[0].lower()] = pin.split(";")[0].strip()
        return wheel_compute(pins)
    return resolve


# --- editing pixi.toml ---------------------------------------------------------------------------

def _blocks(text: str) -> list[list[str]]:
    """The file cut before each table header (the first block is what precedes any)."""
    blocks: list[list[str]] = [[]]
    for line in text.splitlines(True):
        if re.match(r"^\[", line):
            # a comment block directly above a header belongs to that header
            lead = []
            while blocks[-1] and blocks[-1][-1].lstrip().startswith("#"):
                lead.insert(0, blocks[-1].pop())
            blocks.append(lead + [line])
        else:
            blocks[-1].append(line)
    return blocks


def _header(block: list[str]) -> str:
    for line in block:
        if line.startswith("["):
            return line.strip()
    return ""


def _cuda_name(compute: str) -> str:
    return "cuda" + compute.removeprefix("cu")


def _cuda_version(compute: str) -> str:
    digits = compute.removeprefix("cu")
    return f"{digits[:-1]}.{digits[-1]}"


def plan(mx: Matrix, found: dict[Version, Release]) -> Changes:
    """The matrix's pixi.toml with `found`'s newer releases added (and newer patches pinned)."""
    text = mx.path.read_text(encoding="utf-8")
    by_minor: dict[tuple[int, int], list] = {}
    for env in mx.envs:
        by_minor.setdefault((env.release.major, env.release.minor), []).append(env)
    if not by_minor:
        raise BuildError("the matrix has no torch environment to follow", file=mx.path,
                         key="environments")
    latest = max(by_minor)
    latest_envs = by_minor[latest]
    min_cuda = min((Version(e.cuda) for e in latest_envs if e.cuda), default=None)
    newest_patch: dict[tuple[int, int], Version] = {}
    for v in found:
        key = (v.major, v.minor)
        newest_patch[key] = max(newest_patch.get(key, v), v)
    changes = Changes(text)

    # newer patches of minors in the matrix: move their pins
    blocks = _blocks(text)
    for minor, envs in sorted(by_minor.items()):
        pin = Version(envs[0].torch_version)
        new = newest_patch.get(minor)
        if new is None or new <= pin:
            continue
        feats = {f for e in envs for f in e.features if f.startswith(f"pt{minor[0]}{minor[1]}-")}
        for block in blocks:
            m = re.match(r"^\[feature\.([^.\]]+)\.pypi-dependencies\]", _header(block))
            if m and m.group(1) in feats:
                block[:] = [re.sub(rf'"==\s*{re.escape(str(pin))}"', f'"=={new}"', ln)
                            if ln.lstrip().startswith("torch") else ln for ln in block]
        changes.bumped.append(f"{pin} -> {new}")

    # newer minors: features and environments
    new_minors = sorted(k for k in newest_patch if k > latest)
    feature_names = set(mx.raw.get("feature", {}))
    pt_blocks = [b for b in blocks if re.match(r"^\[feature\.pt\d+-\w+\.pypi-dependencies\]", _header(b))]
    cuda_blocks = [b for b in blocks if re.match(r"^\[feature\.cuda\d+[.\]]", _header(b))]
    if not new_minors:
        changes.text = "".join(line for block in blocks for line in block)
        _validate(changes.text, mx.path)
        return changes
    if not pt_blocks or not cuda_blocks:
        raise BuildError("no `ptXY-<compute>` torch feature or `cudaXYZ` toolkit feature to copy",
                         file=mx.path, key="feature")
    index_line = next((ln for ln in pt_blocks[-1] if ln.lstrip().startswith("torch")), "")
    index_base = re.search(r'index\s*=\s*"([^"]*)/[^/"]+"', index_line)
    env_lines = _environment_lines(text)
    template = {("cpu" if "-cpu " in ln else "cuda"): ln for ln in env_lines}
    new_pt, new_cuda, new_envs = [], [], []
    for minor in new_minors:
        version = newest_patch[minor]
        tag = f"{minor[0]}{minor[1]}"
        release = found[version]
        computes = sorted((c for c in release.computes if c == "cpu" or min_cuda is None
                           or Version(_cuda_version(c)) >= min_cuda),
                          key=lambda c: (c == "cpu", int(c[2:]) if c != "cpu" else 0))
        for compute in computes:
            kind = "cpu" if compute == "cpu" else "cuda"
            if kind not in template:
                continue  # the matrix has no environment of this kind to copy
            feature = f"pt{tag}-{compute}"
            index = f', index = "{index_base.group(1)}/{compute}"' if index_base else ""
            new_pt.append([f"[feature.{feature}.pypi-dependencies]\n",
                           f'torch = {{ version = "=={version}"{index} }}\n', "\n"])
            if kind == "cuda" and _cuda_name(compute) not in feature_names:
                new_cuda.append(_toolkit_blocks(cuda_blocks, compute))
                feature_names.add(_cuda_name(compute))
            platforms = [p for p in mx.platforms if p in release.computes[compute]] or \
                sorted(release.computes[compute])
            new_envs.append(_environment_line(template[kind], f"torch{tag}-{compute}", feature,
                                              _cuda_name(compute) if kind == "cuda" else None,
                                              platforms))
            changes.added.append(f"torch{tag}-{compute}")
    if new_pt:
        _insert_after(blocks, pt_blocks[-1], new_pt)
    if new_cuda:
        _insert_after(blocks, cuda_blocks[-1], new_cuda)
    changes.text = "".join(line for block in blocks for line in block)
    if new_envs:
        last = env_lines[-1]
        changes.text = changes.text.replace(last, last + "".join(new_envs), 1)
    _validate(changes.text, mx.path)
    return changes


def _environment_lines(text: str) -> list[str]:
    body = text.split("[environments]", 1)[1].split("\n[", 1)[0] if "[environments]" in text else ""
    return [ln + "\n" for ln in body.splitlines() if re.match(r"^torch\d+-(cu\d+|cpu)\s*=", ln)]


def _environment_line(template: str, name: str, feature: str, cuda: str | None,
                      platforms: list[str]) -> str:
    old = re.match(r"^(torch\d+-(?:cu\d+|cpu))", template).group(1)
    line = template.replace(f'"{old}"', f'"{name}"').replace(old + " ", name + " ", 1)
    line = re.sub(r'features\s*=\s*\[[^\]]*\]', 'features = [' + ", ".join(
        f'"{f}"' for f in [feature] + ([cuda] if cuda else [])) + "]", line)
    if "platforms" in line:
        line = re.sub(r'platforms\s*=\s*\[[^\]]*\]',
                      "platforms = [" + ", ".join(f'"{p}"' for p in platforms) + "]", line)
    return line


def _toolkit_blocks(cuda_blocks: list[list[str]], compute: str) -> list[str]:
    """A toolkit feature for `compute`, copied from the newest existing one."""
    newest = max({re.match(r"^\[feature\.(cuda\d+)", _header(b)).group(1) for b in cuda_blocks},
                 key=lambda n: int(n[4:]))
    old_version = _cuda_version("cu" + newest[4:])
    lines = []
    for block in cuda_blocks:
        if _header(block).startswith(f"[feature.{newest}.") or _header(block) == f"[feature.{newest}]":
            for ln in block:
                if ln.lstrip().startswith("#"):
                    continue
                ln = ln.replace(f"feature.{newest}", f"feature.{_cuda_name(compute)}")
                lines.append(ln.replace(f'"{old_version}.*"', f'"{_cuda_version(compute)}.*"'))
    return lines


def _insert_after(blocks: list[list[str]], anchor: list[str], new: list[list[str]]) -> None:
    at = next(i for i, b in enumerate(blocks) if b is anchor) + 1
    if anchor and anchor[-1].strip():
        anchor.append("\n")
    for offset, block in enumerate(new):
        blocks.insert(at + offset, block)


def _validate(text: str, path: Path) -> None:
    """The edited file parses into a matrix whose every environment agrees with its name."""
    import tempfile

    from .matrix import name_problems
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:  # a bug here, not bad input
        raise BuildError(f"the updated matrix is not valid TOML ({e})", file=path) from None
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / path.name
        copy.write_text(text, encoding="utf-8")
        problems = [p for env in _parse(copy).envs for p in name_problems(env)]
    if problems:
        raise BuildError(f"the updated matrix is inconsistent: {problems}", file=path)


# --- `kbuild matrix update` -----------------------------------------------------------------

def default_index(mx: Matrix) -> str:
    """[tool.kbuild.update] index in pixi.toml, else pip's configured index, else PyPI."""
    from .installer import pip_config
    return (mx.raw.get("tool", {}).get("kbuild", {}).get("update", {}).get("index")
            or (pip_config().get("index-url") or ["https://pypi.org/simple"])[0])


def find_updates(mx: Matrix, index: str) -> tuple[Changes, list[str]]:
    """The changes that bring `mx` up to the torch releases on `index`, and the releases whose
    flavour could not be read (left out)."""
    from .installer import installer
    from .lock import python_minor

    unknown: list[str] = []
    python = python_minor(mx.envs[0]) if mx.envs else "3.11"

    def resolver(version):  # PyPI's default wheel without core metadata: ask uv
        inst = installer()
        return uv_resolver(inst, index, python)(version) if inst.uv else None
    found = releases(index, python, newer_than(mx), resolver, unknown=unknown)
    return plan(mx, found), unknown
