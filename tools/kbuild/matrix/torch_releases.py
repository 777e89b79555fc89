"""The torch releases on a package index, by flavour (`cpu`, a CUDA release) and platform.

The index speaks the simple repository API (PEP 691 JSON, or PEP 503 HTML). On the PyTorch index
(`https://download.pytorch.org/whl`) a release's wheels carry their flavour as a local label
(`2.15.0+cu130`), so every CUDA version it ships is seen; on PyPI only the default wheel exists,
and its CUDA version is read from its core metadata (PEP 658: the `cuda-toolkit` or
`nvidia-cuda-runtime` requirement).

An index is not trusted: only http(s) is read (no file:, ftp:, data:; redirects too), each request
has one deadline for all of it (a server trickling bytes is cut off) and a size cap, and every
answer is validated (its JSON by a model) before anything is read from it.
"""

from __future__ import annotations

import http.client
import re
import urllib.request
from dataclasses import dataclass, field
from email.parser import Parser
from html.parser import HTMLParser
from typing import Callable
from urllib.parse import urljoin, urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError

from ..core import web
from ..core.errors import BuildError

ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"
PLATFORM_OF_TAG = {"x86_64": "linux-64", "aarch64": "linux-aarch64"}
RUNTIME_PACKAGES = ("cuda-toolkit", "nvidia-cuda-runtime", "nvidia-cuda-runtime-cu12",
                    "nvidia-cuda-runtime-cu11")


@dataclass
class Release:
    version: Version
    computes: dict[str, set[str]] = field(default_factory=dict)  # "cu130" -> {"linux-64", ...}


MAX_ANSWER = 64 * 1024 * 1024     # bytes: PyPI's torch page is a few MB
MAX_FILENAME = 255                # a wheel's file name is a file name
WEB = web.WEB
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


def _get(url: str, timeout: float, limit: int = MAX_ANSWER) -> tuple[bytes, str]:
    """The body and Content-Type at `url` (http or https), read within `timeout` seconds in all."""
    hint = "check --index (a simple-API index such as https://pypi.org/simple)"
    if urlsplit(url).scheme not in WEB:
        raise BuildError(f"cannot read {url[:200]}: only http(s) indexes are read", hint=hint)
    req = urllib.request.Request(url, headers={"Accept": ACCEPT, "User-Agent": "kbuild"})
    with web.Deadline(timeout) as deadline:
        try:
            with deadline.opener().open(req, timeout=timeout) as resp:
                body = resp.read(limit + 1)
                ctype = resp.headers.get("Content-Type", "")
        except (OSError, http.client.HTTPException, ValueError) as e:
            if deadline.expired.is_set():
                raise BuildError(f"cannot read {url}: no complete answer within {timeout:g}s",
                                 hint=hint) from None
            raise BuildError(f"cannot read {url}: {getattr(e, 'reason', None) or e}",
                             hint=hint) from None
    if deadline.expired.is_set():
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
