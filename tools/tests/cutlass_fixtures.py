"""pytest fixtures around cutlass_server: the four tag archives served once per test process,
each unpacked once into a shared header cache (tests read it; they change only copies)."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from cutlass_server import ARCHIVES, ArchiveServer, archive_path, available_versions
from kbuild.stages.generate import cutlass
from kbuild.stages.generate.cutlass import sources

VERSIONS = ("2.10.0", "3.9.2", "4.0.0", "4.5.2")  # the releases no wheel gives
REDIRECTED = ("4.0.0", "4.5.2")  # answered with a 302, as GitHub answers


def release(version: str) -> cutlass.Release:
    return next(r for r in cutlass.RELEASES if r.version == version)


def skip_without_archives() -> None:
    missing = [v for v in VERSIONS if not archive_path(v).is_file()]
    if missing:
        pytest.skip(f"the CUTLASS tag archives ({', '.join(missing)}) are not beside this checkout "
                    f"(looked in {ARCHIVES}: ../shared/cutlass, or $KBUILD_TEST_SHARED/cutlass)")


@pytest.fixture(scope="session")
def server():
    """The archives at GitHub's paths on 127.0.0.1 (two of them behind a 302)."""
    skip_without_archives()
    with ArchiveServer() as srv:
        for version in available_versions():
            srv.serve(version, archive_path(version).read_bytes(), redirect=version in REDIRECTED)
        yield srv


def private_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o755)
    return path


@pytest.fixture(scope="session")
def archive_cache(server, tmp_path_factory) -> Path:
    """A cache root holding the four releases, fetched from `server` once per process."""
    root = private_dir(tmp_path_factory.mktemp("cutlass-archives") / "cache")
    old = os.environ.get(sources.URL_VAR)
    os.environ[sources.URL_VAR] = server.base
    try:
        for version in VERSIONS:
            cutlass.provision(release(version), root, warn=pytest.fail)
    finally:
        if old is None:
            os.environ.pop(sources.URL_VAR)
        else:
            os.environ[sources.URL_VAR] = old
    return root


@pytest.fixture
def no_pypi(monkeypatch):
    """pip replaced by a download that cannot reach PyPI; lists the wheels asked for."""
    asked = []

    def unreachable(wheel, release, into):
        asked.append(wheel.filename)
        raise sources.Unreachable("no network in this test")

    monkeypatch.setattr(sources, "_download_wheel", unreachable)
    return asked


@pytest.fixture
def served(server, monkeypatch, no_pypi):
    """KBUILD_CUTLASS_URL pointing at `server`, no PyPI; `served.hits` (and `.auth`) start empty."""
    monkeypatch.setenv(sources.URL_VAR, server.base)
    server.hits.clear()
    server.auth.clear()
    return server


@pytest.fixture(scope="session")
def members_2_10():
    """The members of the 2.10.0 archive with their data (None for folders), to make altered
    copies of it."""
    skip_without_archives()
    out = []
    with tarfile.open(archive_path("2.10.0"), "r:gz") as archive:
        for member in archive:
            data = archive.extractfile(member).read() if member.isreg() else None
            out.append((member, data))
    return out


def make_archive(members) -> bytes:
    """A gzip'd tar of (TarInfo, data) pairs, in GitHub's pax format."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT, compresslevel=1) as out:
        for info, data in members:
            info = _copy(info)
            if data is not None:
                info.size = len(data)
            out.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _copy(info: tarfile.TarInfo) -> tarfile.TarInfo:
    new = tarfile.TarInfo(info.name)
    for field in ("size", "mode", "mtime", "type", "linkname", "uid", "gid", "uname", "gname"):
        setattr(new, field, getattr(info, field))
    return new


def entry(name: str, data: bytes | None = None, *, type=tarfile.REGTYPE, linkname: str = "",
          mode: int = 0o664) -> tuple[tarfile.TarInfo, bytes | None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = type, linkname, mode
    return info, data
