"""The Hub client: `HfApi` calls with retries on transient failures, and every Hub error mapped
to one BuildError line of our own wording, scrubbed of the token and of URL credentials."""

from __future__ import annotations

import os
import re
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator
from urllib.parse import urlsplit

from ..core.errors import BuildError

REPO_TYPE = "kernel"
RETRY_STATUS = (408, 429, 500, 502, 503, 504)

Log = Callable[[str], None]


def _transport_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [ConnectionError, TimeoutError]
    for module, name in (("httpx2", "TransportError"), ("httpx", "TransportError"),
                         ("requests.exceptions", "ConnectionError"),
                         ("requests.exceptions", "Timeout")):
        try:
            errors.append(getattr(__import__(module, fromlist=[name]), name))
        except (ImportError, AttributeError):
            pass
    return tuple(errors)


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def is_transient(exc: BaseException) -> bool:
    from huggingface_hub.errors import OfflineModeIsEnabled
    if isinstance(exc, OfflineModeIsEnabled):
        return False
    status = _status(exc)
    if status is not None:
        return status in RETRY_STATUS
    return isinstance(exc, _transport_errors())


_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s]*@")


class Scrub:
    """Removes secrets from any text we print: the token, and the `user:password@` of URLs.
    Every URL and exception text that publish/ prints goes through one."""

    def __init__(self, token: str | None):
        self.token = token

    def __call__(self, text: str) -> str:
        text = _URL_USERINFO.sub(r"\1***@", text)
        return text.replace(self.token, "***") if self.token and len(self.token) >= 4 else text


def check_endpoint(endpoint: str | None) -> None:
    """Refuses a malformed endpoint: `endpoint`, and HF_ENDPOINT, which huggingface_hub parses
    as soon as it is imported (so this runs before anything imports it)."""
    for key, url in (("HF_ENDPOINT", os.environ.get("HF_ENDPOINT")), ("endpoint", endpoint)):
        if not url:
            continue
        try:
            parts = urlsplit(url)
            valid = parts.scheme in ("http", "https") and bool(parts.hostname) and (
                parts.port is None or parts.port > 0)
        except ValueError:  # e.g. an unclosed IPv6 bracket, a port out of range
            valid = False
        if not valid:
            raise BuildError(f"{key} {Scrub(None)(url)!r} is not an http(s) URL", key=key,
                             hint="e.g. HF_ENDPOINT=http://127.0.0.1:8080; unset it to use the "
                                  "Hugging Face Hub")


def hub_error(exc: BaseException, *, what: str, repo_id: str, endpoint: str,
              scrub: Callable[[str], str] = Scrub(None)) -> BuildError:
    """One clear line for a Hub failure (never the token, never a traceback)."""
    err = _hub_error(exc, what=what, repo_id=repo_id, endpoint=endpoint, scrub=scrub)
    return BuildError(scrub(err.message), hint=scrub(err.hint) if err.hint else None)


def _hub_error(exc: BaseException, *, what: str, repo_id: str, endpoint: str,
               scrub: Callable[[str], str]) -> BuildError:
    from huggingface_hub.errors import OfflineModeIsEnabled
    org = repo_id.split("/", 1)[0]
    status = _status(exc)
    server_lines = str(getattr(exc, "server_message", None) or "").strip().splitlines()
    server = scrub(server_lines[0]) if server_lines else ""
    if isinstance(exc, OfflineModeIsEnabled):
        return BuildError(f"{what}: HF_HUB_OFFLINE is set, so the Hub cannot be reached",
                          hint="unset HF_HUB_OFFLINE")
    if status == 401:
        return BuildError(f"{what}: authentication failed (HTTP 401): the Hugging Face token is "
                          "missing, invalid or expired",
                          hint="set HF_TOKEN to a valid write token or run `hf auth login`")
    if status == 403:
        return BuildError(f"{what}: permission denied (HTTP 403)"
                          + (f": {server}" if server else ""),
                          hint=f"the token needs write access to the `{org}` namespace")
    if status == 404:
        return BuildError(f"{what}: not found (HTTP 404)" + (f": {server}" if server else ""),
                          hint=f"check the repo id `{repo_id}` and that `{org}` exists")
    if status == 412:
        return BuildError(f"{what}: the branch moved while uploading (HTTP 412); nothing was "
                          "committed", hint="someone else pushed at the same time; run it again")
    if status is not None:
        return BuildError(f"{what}: the Hub answered HTTP {status}"
                          + (f": {server}" if server else ""),
                          hint="nothing was committed; run it again to finish")
    if isinstance(exc, _transport_errors()):
        return BuildError(f"{what}: cannot reach {endpoint} ({type(exc).__name__})",
                          hint="check the network or HF_ENDPOINT; nothing was committed, "
                               "run it again to finish")
    detail = scrub(str(exc)).strip().splitlines()
    return BuildError(f"{what}: {type(exc).__name__}" + (f": {detail[0]}" if detail else ""))


@contextmanager
def no_progress_bars(off: bool = True) -> Iterator[None]:
    """huggingface_hub's progress bars off for a while (when `off`), as they were afterwards."""
    from huggingface_hub.utils import (are_progress_bars_disabled, disable_progress_bars,
                                       enable_progress_bars)
    was_off = are_progress_bars_disabled()
    if off:
        disable_progress_bars()
    try:
        yield
    finally:
        if off and not was_off:
            enable_progress_bars()


KERNEL_REPOS_SINCE = (2, 3)  # huggingface_hub's first release that commits to kernel repos


def check_client() -> None:
    """One clear error where the installed huggingface_hub cannot publish to a kernel repo."""
    import huggingface_hub
    version = huggingface_hub.__version__
    found = tuple(int(p) for p in re.findall(r"\d+", version)[:2])
    if found < KERNEL_REPOS_SINCE:
        raise BuildError(f"huggingface_hub {version} cannot commit to kernel repos",
                         hint="pip install 'huggingface_hub>=%d.%d'" % KERNEL_REPOS_SINCE)


class HubClient:
    """HfApi calls with retry-on-transient and one-line errors."""

    def __init__(self, repo_id: str, *, endpoint: str | None, token: str | None, log: Log,
                 retries: int, backoff: float):
        check_endpoint(endpoint)
        from huggingface_hub import HfApi
        self.api = HfApi(endpoint=endpoint, token=token)
        self.endpoint = self.api.endpoint.rstrip("/")
        self.repo_id = repo_id
        self.log = log
        self.retries = retries
        self.backoff = backoff
        self.scrub = Scrub(token or self._token())

    @staticmethod
    def _token() -> str | None:
        from huggingface_hub import get_token
        try:
            return get_token()
        except Exception:
            return None

    def call(self, what: str, fn: Callable[[], Any]) -> Any:
        for attempt in range(self.retries + 1):
            try:
                return fn()
            except BuildError:
                raise
            except Exception as exc:
                if is_transient(exc) and attempt < self.retries:
                    delay = self.backoff * 2 ** attempt
                    reason = f"HTTP {_status(exc)}" if _status(exc) else type(exc).__name__
                    self.log(f"{what}: {reason}; retrying in {delay:.1f}s "
                             f"({attempt + 1}/{self.retries})")
                    time.sleep(delay)
                    continue
                raise hub_error(exc, what=what, repo_id=self.repo_id, endpoint=self.endpoint,
                                scrub=self.scrub) from None
        raise AssertionError("unreachable")

    # -- reads ---------------------------------------------------------------------------

    def exists(self) -> bool:
        from huggingface_hub.errors import RepositoryNotFoundError

        def probe() -> bool:
            try:
                self.api.repo_info(self.repo_id, repo_type=REPO_TYPE)
                return True
            except RepositoryNotFoundError as exc:
                if _status(exc) in (401, 403):
                    raise
                return False
        return self.call(f"reading {self.repo_id}", probe)

    def refs(self) -> tuple[dict[str, str], dict[str, str]]:
        """({branch: commit}, {tag: commit})."""
        refs = self.api.list_repo_refs(self.repo_id, repo_type=REPO_TYPE)
        return ({b.name: b.target_commit for b in refs.branches},
                {t.name: t.target_commit for t in refs.tags})

    def branches(self) -> dict[str, str]:
        refs = self.api.list_repo_refs(self.repo_id, repo_type=REPO_TYPE)
        return {b.name: b.target_commit for b in refs.branches}

    def tags(self) -> dict[str, str]:
        refs = self.api.list_repo_refs(self.repo_id, repo_type=REPO_TYPE)
        return {t.name: t.target_commit for t in refs.tags}

    def entries(self, revision: str, paths: list[str]) -> dict[str, Any]:
        """{path: RepoFile | RepoFolder} of everything under the folders `paths` at `revision`."""
        from huggingface_hub.errors import EntryNotFoundError
        out: dict[str, Any] = {}
        for top in paths:
            try:
                out.update({e.path: e for e in self.api.list_repo_tree(
                    self.repo_id, path_in_repo=top, recursive=True, revision=revision,
                    repo_type=REPO_TYPE)})
            except EntryNotFoundError:
                continue
        return out

    def tree(self, revision: str, paths: list[str]) -> dict[str, str]:
        """{path: blob oid} of every file under the folders `paths` at `revision`."""
        from huggingface_hub import RepoFile
        return {p: e.blob_id for p, e in self.entries(revision, paths).items()
                if isinstance(e, RepoFile)}

    def read_file(self, revision: str, path: str, max_bytes: int) -> bytes:
        """A small file's bytes (no progress bar, nothing cached); ValueError past `max_bytes`,
        whatever size the listing said."""
        from huggingface_hub import hf_hub_url
        from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status
        url = hf_hub_url(self.repo_id, path, repo_type=REPO_TYPE, revision=revision,
                         endpoint=self.endpoint)

        def fetch() -> bytes | None:
            with get_session().stream("GET", url, headers=build_hf_headers(token=self.api.token),
                                      follow_redirects=True, timeout=60) as response:
                if response.status_code >= 400:
                    response.read()
                    hf_raise_for_status(response)
                data = bytearray()
                for chunk in response.iter_bytes():
                    data += chunk
                    if len(data) > max_bytes:
                        return None
                return bytes(data)
        data = self.call(f"reading {path}", fetch)
        if data is None:
            raise ValueError(f"{path} is over {max_bytes} bytes")
        return data

    def file_oids(self, revision: str, paths: list[str]) -> dict[str, str]:
        from huggingface_hub import RepoFile
        infos = self.api.get_paths_info(self.repo_id, paths, revision=revision, repo_type=REPO_TYPE)
        return {i.path: i.blob_id for i in infos if isinstance(i, RepoFile)}
