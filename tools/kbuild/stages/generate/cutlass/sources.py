"""Where a release's headers are fetched from, and how they are unpacked (nothing is run).

Two sources, both checked against the release's tree digest afterwards (cache.py):

- the wheel on PyPI shown identical to the tag, downloaded by pip (wheels only) and checked by
  its sha256; pip uses the machine's index settings;
- NVIDIA's tag archive, `<base>/v<version>.tar.gz`, base `$KBUILD_CUTLASS_URL` or GitHub's
  tags URL, read as a stream (redirects followed, within one deadline) and unpacked as it
  arrives, with caps on what the archive may make it read.

The wheel comes first where there is one (fewer bytes, and PyPI is reachable where GitHub may
not be), unless KBUILD_CUTLASS_URL is set: then the user points at a mirror, which comes first.
When a source cannot be reached (network, HTTP status, pip failing, the deadline) the next one
is tried; a source that answers with something else than the release is refused at once.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import os
import sys
import tarfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable

from .... import __version__
from ....core import web
from ....core.errors import BuildError
from ....core.runner import capture
from .releases import HEADER_TREES, Release, Wheel

URL_VAR = "KBUILD_CUTLASS_URL"
DEFAULT_URL = "https://github.com/NVIDIA/cutlass/archive/refs/tags"
SCHEMES = ("http", "https", "file")
TIMEOUT_S = 60  # per network operation
DEADLINE_S = 900  # one archive's whole download, redirects included
MAX_TREE_BYTES = 256 << 20  # the header trees are ~30 MB: more is not a CUTLASS release
MAX_ARCHIVE_BYTES = 1 << 30  # the whole archive unpacked, members outside the trees included
MAX_HEADER_BYTES = 1 << 20  # one pax or GNU long-name record (a path takes a few hundred bytes)
_CHUNK = 1 << 16
SOURCE_KEYS = ("package", "version", "wheel_sha256", "url")  # Source.record()'s
Note = Callable[[str], None]


class Unreachable(Exception):
    """The source could not be reached; the next one is tried."""


@dataclass(frozen=True)
class Source:
    """One place a release can come from: a wheel, or the tag archive at `url`."""

    wheel: Wheel | None = None
    url: str | None = None

    def describe(self) -> str:
        return self.wheel.describe() if self.wheel else _public(str(self.url))

    def record(self) -> dict[str, str]:
        """What the stamp and provenance say about it."""
        if self.wheel:
            return {"package": self.wheel.package, "version": self.wheel.version,
                    "wheel_sha256": self.wheel.sha256}
        return {"url": _public(str(self.url))}


def _public(url: str) -> str:
    """`url` without what may be secret in a mirror's URL (user, password, query)."""
    return web.public(url)


def mirror() -> str | None:
    """$KBUILD_CUTLASS_URL when set: an http(s) URL, or a folder as a file:// URL. Anything else
    is refused naming the variable, before anything is downloaded (its value is shown only
    where it cannot hold a password)."""
    raw = os.environ.get(URL_VAR, "").strip()
    if not raw:
        return None
    hint = (f"set {URL_VAR} to the URL under which v<version>.tar.gz is served "
            "(https://host/path), or to a folder as a file:// URL (file:///srv/cutlass-mirror)")
    if raw.startswith(("/", "~", "./", "../")) or raw in (".", ".."):
        folder = Path(raw).expanduser().absolute()
        raise BuildError(f"{URL_VAR}={raw} is a folder, not a URL",
                         hint=f"give a folder as a file:// URL: {URL_VAR}={folder.as_uri()}")
    try:
        parts = urllib.parse.urlsplit(raw)
        parts.port  # noqa: B018 (a port that is not a number raises here)
    except ValueError:
        raise BuildError(f"{URL_VAR} is not a valid URL: its host or port is malformed",
                         hint=hint) from None
    if parts.scheme not in SCHEMES:
        what = (f"has the scheme {parts.scheme}:" if parts.scheme.isalpha() else
                "is not a URL (it has no scheme such as https://)")
        raise BuildError(f"{URL_VAR} {what} only http://, https:// and file:// are read",
                         hint=hint)
    if parts.scheme == "file" and parts.netloc not in ("", "localhost"):
        raise BuildError(f"{URL_VAR} names a folder on another host ({parts.scheme}://HOST/...)",
                         hint=f"give a folder of this machine as file:///path ({URL_VAR})")
    if parts.scheme != "file" and not parts.hostname:
        raise BuildError(f"{URL_VAR} has no host", hint=hint)
    return raw


def archive_url(release: Release) -> str:
    """The tag archive's URL: `v<version>.tar.gz` appended to the path of the mirror's URL (or
    GitHub's tags URL); the mirror's query, user and password are kept for the request and
    left out of everything shown or recorded (`_public`)."""
    parts = urllib.parse.urlsplit(mirror() or DEFAULT_URL)
    return urllib.parse.urlunsplit(parts._replace(
        path=f"{parts.path.rstrip('/')}/{release.tag}.tar.gz", fragment=""))


def sources(release: Release) -> list[Source]:
    """The sources of `release`, in the order they are tried."""
    archive = Source(url=archive_url(release))
    if release.wheel is None:
        return [archive]
    wheel = Source(wheel=release.wheel)
    return [archive, wheel] if mirror() else [wheel, archive]


def fetch(source: Source, release: Release, dest: Path, scratch: Path,
          note: Note | None = None) -> dict[str, str]:
    """Writes the header trees of `source` to `dest` (folders 755, files 644) and returns each
    file's sha256 by path; Unreachable, or a BuildError when it is not a sound source. `note`
    is told what is downloaded before the wait starts."""
    note = note or (lambda text: None)
    if source.wheel:
        note(f"downloading CUTLASS {release.version}'s headers: {source.describe()} (pip)")
        return _unpack_wheel(_download_wheel(source.wheel, release, scratch), source.wheel.prefix,
                             dest, release)
    note(f"downloading CUTLASS {release.version}'s headers from {source.describe()} "
         f"(at most {DEADLINE_S} s)")
    return _unpack_archive_from(str(source.url), release, dest)


# --- names -------------------------------------------------------------------------------------

def name_problem(name: str) -> str | None:
    """Why `name` cannot be a header's path: not UTF-8, or holding a control character (a newline
    in a name could pass for a line of the tree digest's listing)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "its name is not UTF-8"
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in name):
        return "its name holds a control character"
    return None


def shown(name: str) -> str:
    """`name` as it can be printed: escaped where it is not plain UTF-8 text."""
    if name_problem(name) is None:
        return name
    return repr(name.encode("utf-8", "surrogateescape"))[2:-1]


# --- the wheel ---------------------------------------------------------------------------------

def _download_wheel(wheel: Wheel, release: Release, into: Path) -> Path:
    proc = capture([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                    "--disable-pip-version-check",
                    f"{wheel.package}=={wheel.version}", "-d", str(into)], timeout=900)
    path = into / wheel.filename
    if proc.returncode != 0 or not path.is_file():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-2:]
        raise Unreachable("pip could not download it: " + " / ".join(tail))
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != wheel.sha256:
        raise BuildError(f"{wheel.filename} (CUTLASS {release.version}'s headers) has sha256 "
                         f"{digest}, expected {wheel.sha256}",
                         hint="the download was altered; remove pip's cache and build again")
    return path


def _unpack_wheel(wheel: Path, prefix: str, dest: Path, release: Release) -> dict[str, str]:
    tree = _Tree(dest)
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            rel = info.filename.removeprefix(prefix)
            if (info.is_dir() or not info.filename.startswith(prefix) or not rel.startswith(HEADER_TREES)
                    or any(p in ("", ".", "..") for p in rel.split("/"))):
                continue
            if name_problem(rel):
                raise BuildError(f"refused {wheel.name} for CUTLASS {release.version}: "
                                 f"{shown(info.filename)}: {name_problem(rel)}",
                                 hint="nothing was cached; remove pip's cache and build again")
            with zf.open(info) as data:
                tree.add(rel, data)
    return tree.files


# --- the tag archive ---------------------------------------------------------------------------

def _one_line(text: object) -> str:
    return " ".join(str(text).split())


class _Network:
    """The response body; a failure while reading it is the network's (Unreachable), and so is
    the deadline passing."""

    def __init__(self, response: IO[bytes], deadline: web.Deadline):
        self.response, self.deadline = response, deadline

    def late(self) -> Unreachable:
        return Unreachable(f"gave up after {self.deadline.seconds:g} s: the download did not "
                           "finish in time")

    def read(self, size: int = -1) -> bytes:
        try:
            data = self.response.read(size)
        except (OSError, http.client.HTTPException) as e:
            if self.deadline.expired.is_set():
                raise self.late() from None
            raise Unreachable(f"the download broke off: {_one_line(e) or type(e).__name__}") from None
        if self.deadline.expired.is_set():
            raise self.late()
        missing = getattr(self.response, "length", None)  # of a Content-Length not yet received
        if not data and size and missing:
            raise Unreachable(f"the download broke off, {missing} bytes short")
        return data


def _request(url: str) -> tuple[urllib.request.Request, list[urllib.request.BaseHandler]]:
    """The request for `url` and the handlers it needs: a user and password in the URL become
    HTTP Basic authentication for that host only (never sent to a host a redirect names, never
    part of the host name looked up), a file:// URL is read from the folder."""
    parts = urllib.parse.urlsplit(url)
    handlers: list[urllib.request.BaseHandler] = []
    if parts.scheme == "file":
        handlers.append(urllib.request.FileHandler())
    if parts.username is not None or parts.password is not None:
        host = parts.netloc.rpartition("@")[2]
        url = urllib.parse.urlunsplit(parts._replace(netloc=host))
        passwords = urllib.request.HTTPPasswordMgrWithPriorAuth()
        passwords.add_password(None, f"{parts.scheme}://{host}/",
                               urllib.parse.unquote(parts.username or ""),
                               urllib.parse.unquote(parts.password or ""), is_authenticated=True)
        handlers.append(urllib.request.HTTPBasicAuthHandler(passwords))
    return urllib.request.Request(url, headers={"User-Agent": f"kbuild/{__version__}"}), handlers


def _open(url: str, deadline: web.Deadline) -> IO[bytes]:
    request, handlers = _request(url)
    try:
        return deadline.opener(*handlers).open(request, timeout=TIMEOUT_S)  # follows GitHub's 302
    except urllib.error.HTTPError as e:
        if 300 <= e.code < 400:
            raise Unreachable(f"HTTP {e.code}: too many redirects (a redirect loop)") from None
        raise Unreachable(f"HTTP {e.code} {_one_line(e.reason)}") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as e:
        if deadline.expired.is_set():
            raise Unreachable(f"gave up after {deadline.seconds:g} s: no complete answer in "
                              "time") from None
        raise Unreachable(_one_line(getattr(e, "reason", None) or e) or type(e).__name__) from None


def _unpack_archive_from(url: str, release: Release, dest: Path) -> dict[str, str]:
    with web.Deadline(DEADLINE_S) as deadline, _open(url, deadline) as response:
        return unpack_archive(_Network(response, deadline), release, dest, _public(url))


class _Refusal(Exception):
    """What makes an archive's headers unreadable here, said in a few words."""


# Header records tarfile reads whole into memory.
_RECORDS = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE, tarfile.GNUTYPE_LONGNAME,
            tarfile.GNUTYPE_LONGLINK)


class _Member(tarfile.TarInfo):
    """A member's header as tarfile reads it, through its hook for subclasses (`_proc_member`):
    a pax or GNU long-name record larger than MAX_HEADER_BYTES is refused before it is read,
    and so are sparse members (never in a tag archive), before their maps are read."""

    def _proc_member(self, tarfile_):
        if self.type in _RECORDS and self.size > MAX_HEADER_BYTES:
            raise _Refusal(f"a header record of {self.size} bytes (more than "
                           f"{MAX_HEADER_BYTES >> 10} KiB)")
        if self.type == tarfile.GNUTYPE_SPARSE:
            raise _Refusal(f"{shown(self.name)} is a sparse file")
        return super()._proc_member(tarfile_)

    def _sparse(self, *args) -> None:
        raise _Refusal("it holds a sparse file (a pax GNU.sparse header)")

    _proc_gnusparse_00 = _proc_gnusparse_01 = _proc_gnusparse_10 = _sparse


class _Capped:
    """The decompressed archive, read through a count: more than MAX_ARCHIVE_BYTES is refused
    (a small archive of zeros can unpack to gigabytes)."""

    def __init__(self, stream: IO[bytes]):
        self.stream, self.size = stream, 0

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(size if 0 <= size <= _CHUNK else _CHUNK)
        self.size += len(data)
        if self.size > MAX_ARCHIVE_BYTES:
            raise _Refusal(f"it unpacks to more than {MAX_ARCHIVE_BYTES >> 20} MiB")
        return data


def unpack_archive(stream, release: Release, dest: Path, origin: str) -> dict[str, str]:
    """The header trees of the gzip'd tar `stream`, GitHub's layout (one top folder
    `cutlass-<version>/`), written to `dest`. A member whose path is absolute, holds `..`, lies
    outside the top folder or is not UTF-8 text without control characters refuses the
    archive, as does anything in the header trees that is not a plain file or folder (a link, a
    device), a header record over MAX_HEADER_BYTES, a sparse member, and more than
    MAX_ARCHIVE_BYTES unpacked. Members outside the trees are read past and never written."""
    top = f"cutlass-{release.version}"

    def refuse(why: str) -> BuildError:
        return BuildError(f"refused the archive {origin} for CUTLASS {release.version}: {why}",
                          hint=f"nothing was cached; check {URL_VAR} (a mirror must serve "
                               f"NVIDIA's {release.tag} archive unchanged) and build again")
    try:
        tree = _Tree(dest)
        unpacked = _Capped(gzip.GzipFile(fileobj=stream, mode="rb"))
        with tarfile.open(fileobj=unpacked, mode="r|", tarinfo=_Member, encoding="utf-8",
                          errors="surrogateescape") as archive:
            for member in archive:
                problem = name_problem(member.name)
                if problem:
                    raise refuse(f"{shown(member.name)}: {problem}")
                parts = member.name.split("/")
                if member.name.startswith("/") or ".." in parts or parts[0] != top:
                    raise refuse(f"{member.name!r} is outside its top folder {top}/")
                rel = "/".join(p for p in parts[1:] if p not in ("", "."))
                if not (rel + "/").startswith(HEADER_TREES) or member.isdir():
                    continue
                if not member.isreg():
                    kind = ("a symbolic link" if member.issym() else "a hard link" if member.islnk()
                            else "not a plain file")
                    raise refuse(f"{member.name} is {kind}")
                if rel in tree.files:
                    raise refuse(f"{member.name} appears twice")
                data = archive.extractfile(member)
                assert data is not None  # a regular member has data
                tree.add(rel, data)
    except _Refusal as e:
        raise refuse(str(e)) from None
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile, ValueError) as e:
        raise refuse(f"it is not a complete gzip'd tar archive ({_one_line(e) or type(e).__name__})"
                     ) from None
    except _TooBig:
        raise refuse(f"its header trees exceed {MAX_TREE_BYTES >> 20} MiB") from None
    except OSError as e:
        raise refuse(f"it cannot be unpacked: {_one_line(e)}") from None
    if not tree.files:
        raise refuse(f"it holds no {' or '.join(HEADER_TREES)} under {top}/")
    return tree.files


# --- writing -----------------------------------------------------------------------------------

class _TooBig(Exception):
    pass


class _Tree:
    """A header tree being written: folders 755 and files 644 (never the source's modes),
    at most MAX_TREE_BYTES; `files` holds each file's sha256 by path."""

    def __init__(self, dest: Path):
        self.dest, self.size, self.files = dest, 0, {}
        _make_dir(dest)

    def add(self, rel: str, data: IO[bytes]) -> None:
        target = self.dest.joinpath(*rel.split("/"))
        for folder in reversed(target.relative_to(self.dest).parents[:-1]):
            if not (self.dest / folder).is_dir():
                _make_dir(self.dest / folder)
        digest = hashlib.sha256()
        with open(target, "xb") as out:
            while chunk := data.read(_CHUNK):
                self.size += len(chunk)
                if self.size > MAX_TREE_BYTES:
                    raise _TooBig
                digest.update(chunk)
                out.write(chunk)
        target.chmod(0o644)
        self.files[rel] = digest.hexdigest()


def _make_dir(path: Path) -> None:
    path.mkdir()
    path.chmod(0o755)
