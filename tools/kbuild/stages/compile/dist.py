"""Distributed compiles through sccache-dist: a scheduler hands a build's compile steps to build
servers, each of which runs them in a bubblewrap sandbox (docs/build-speed.md says how to run
them).

A build uses a scheduler when one is configured: `--dist-scheduler URL` (KBUILD_DIST_SCHEDULER)
with the client token in KBUILD_DIST_TOKEN, or the `[dist]` section of the user's sccache
configuration ($SCCACHE_CONF, else ~/.config/sccache/config). It then compiles C++ and CUDA
through sccache, which splits each nvcc compile into its steps (cudafe++, cicc and ptxas per
capability, the host compiler), packages each compiler once for the servers and sends them the
preprocessed sources. The build talks to an sccache server of its own, started with that
configuration on a free port and stopped afterwards, so a server already running with another
configuration is never used by mistake.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import stat
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator
from urllib.parse import unquote, urlparse

from ...core import web
from ...core.errors import BuildError
from ...core.runner import capture

SCHEDULER_VAR = "KBUILD_DIST_SCHEDULER"
TOKEN_VAR = "KBUILD_DIST_TOKEN"
IDLE_S = 600  # our sccache server ends by itself this long after a build killed before it stops it


@dataclass(frozen=True)
class Dist:
    """A configured scheduler: `given` when named by --dist-scheduler (then `token` is the client
    token), else read from the user's sccache configuration `config`."""
    scheduler: str
    given: bool
    config: Path | None = None
    token: str | None = None


def user_config() -> Path | None:
    """The sccache configuration file sccache itself reads, when it exists."""
    named = os.environ.get("SCCACHE_CONF", "").strip()
    if named:
        return Path(named).expanduser()
    home = os.environ.get("XDG_CONFIG_HOME", "").strip() or str(Path.home() / ".config")
    return Path(home) / "sccache" / "config"


def _read(path: Path) -> dict:
    import tomlkit
    try:
        return tomlkit.parse(path.read_text(encoding="utf-8")).unwrap()
    except OSError:
        return {}
    except Exception as e:  # tomlkit's parse errors share no base class but Exception
        raise BuildError(f"not valid TOML: {e}", file=path,
                         hint="fix the sccache configuration, or point SCCACHE_CONF elsewhere") from None


def _dist_section(path: Path) -> dict:
    """The [dist] table of the sccache configuration at `path` ({} without one)."""
    section = _read(path).get("dist", {})
    if not isinstance(section, dict):
        raise BuildError("`dist` must be a table ([dist]) of sccache's settings", file=path,
                         key="dist", hint="fix the sccache configuration, or point SCCACHE_CONF "
                                          "elsewhere")
    return section


def _check_url(url: str, where: str) -> str:
    try:
        parsed = urlparse(url)
        ok = parsed.scheme in ("http", "https") and bool(parsed.hostname)
        parsed.port  # noqa: B018 (a port that is not a number raises here)
    except ValueError:
        ok = False
    if not ok:
        raise BuildError(f"{where} {web.public(url)!r} is not an http:// or https:// URL",
                         hint="name the scheduler as sccache's clients reach it, e.g. "
                              "http://10.0.0.5:10600")
    return url


def configured(scheduler: str | None = None) -> Dist | None:
    """The scheduler this build uses, if any: `scheduler` (--dist-scheduler), else
    KBUILD_DIST_SCHEDULER, else the user's sccache configuration (a bad setting is refused,
    naming it)."""
    url = _given(scheduler)
    config = user_config()
    if url:
        _check_url(url, f"--dist-scheduler ({SCHEDULER_VAR})")
        token = os.environ.get(TOKEN_VAR, "").strip()
        own_auth = config and config.is_file() and _dist_section(config).get("auth")
        if not token and not own_auth:
            raise BuildError(f"{TOKEN_VAR} is not set: the scheduler at {web.public(url)} needs "
                             "the client token",
                             hint=f"export {TOKEN_VAR}=<the token of the scheduler's [client_auth]>")
        return Dist(url, True, config if config and config.is_file() else None, token or None)
    if config and config.is_file():
        url = str(_dist_section(config).get("scheduler_url", "")).strip()
        if url:
            return Dist(_check_url(url, f"{config}: [dist] scheduler_url"), False, config)
    return None


def _given(scheduler: str | None) -> str:
    """The scheduler named for this build: the option's, else the variable's ("" if none)."""
    return (scheduler if scheduler is not None else os.environ.get(SCHEDULER_VAR, "")).strip()


def check_scheduler(url: str | None) -> str | None:
    """--dist-scheduler, refused before anything runs when it is no URL or its token is missing."""
    if url is not None:
        configured(url)
    return url


def scrub(text: str, dist: Dist) -> str:
    """`text` (what sccache said) without the build's secrets: the client token, a password in
    the scheduler's URL, the token of the configuration's [dist.auth] (sccache's parse errors
    quote the offending line), any `user:password@` of a URL."""
    secrets = [dist.token or "", os.environ.get(TOKEN_VAR, "").strip()]
    parts = urlparse(dist.scheduler)
    secrets += [parts.password or "", unquote(parts.password or "")]
    try:
        auth = _dist_section(dist.config).get("auth") if dist.config else None
    except BuildError:
        auth = None
    if isinstance(auth, dict) and isinstance(auth.get("token"), str):
        secrets.append(auth["token"])
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, "***")
    text = re.sub(r"""(token\s*=\s*)("[^"]*"|'[^']*')""", r'\1"***"', text)
    return re.sub(r"(\w+://)[^/@\s]*@", r"\1", text)


def is_sccache(launcher: str | None) -> bool:
    return bool(launcher) and "sccache" in Path(launcher).name


def for_launcher(launcher: str | None, scheduler: str | None = None) -> Dist | None:
    """The scheduler to use with this compiler launcher: only sccache distributes; a scheduler
    named for this build (`scheduler`, or the variable) with another launcher chosen is refused."""
    if not is_sccache(launcher) and not _given(scheduler):
        return None  # the user's sccache configuration is not sccache's business here
    dist = configured(scheduler)
    if dist and not is_sccache(launcher):
        if dist.given:
            raise BuildError(f"distributed compiles go through sccache, and this build compiles "
                             f"with {launcher or 'no compiler cache'} (KBUILD_COMPILER_CACHE)",
                             hint="unset KBUILD_COMPILER_CACHE (or set it to sccache), or leave "
                                  "out --dist-scheduler")
        return None
    return dist


def _client_config(dist: Dist) -> str:
    """The user's sccache configuration with [dist] pointing at the scheduler, the token as its
    client auth."""
    import tomlkit
    doc = _read(dist.config) if dist.config else {}
    section = dict(doc.get("dist", {}))
    section["scheduler_url"] = dist.scheduler
    if dist.token:
        section["auth"] = {"type": "token", "token": dist.token}
    section.setdefault("toolchains", [])
    doc["dist"] = section
    return tomlkit.dumps(doc)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Session:
    """The sccache server of one build: its environment for every compile, and what it did."""
    sccache: str
    dist: Dist
    env: dict[str, str] = field(default_factory=dict)
    status: str = ""

    def stats(self) -> dict:
        proc = capture([self.sccache, "--show-stats", "--stats-format", "json"],
                       env={**os.environ, **self.env}, timeout=60)
        try:
            return json.loads(proc.stdout)["stats"]
        except (ValueError, KeyError, TypeError):
            return {}

    def counts(self) -> "DistCounts":
        stats = self.stats()
        return DistCounts(web.public(self.dist.scheduler), dict(stats.get("dist_compiles") or {}),
                          int(stats.get("dist_errors") or 0), self.status)


@dataclass(frozen=True)
class DistCounts:
    """The compiles this build's sccache sent to build servers, by server (sccache's counters)."""
    scheduler: str
    by_server: dict[str, int]
    failed: int = 0
    status: str = ""

    @property
    def total(self) -> int:
        return sum(self.by_server.values())

    def __str__(self) -> str:
        where = f"distributed compiles ({self.scheduler})"
        if not self.total:
            return f"{where}: none, every compile ran here ({self.status or 'no build server took one'})"
        servers = ", ".join(f"{s}: {n}" for s, n in sorted(self.by_server.items()))
        return (f"{where}: {self.total} on {len(self.by_server)} build server"
                f"{'s' if len(self.by_server) != 1 else ''} ({servers}), {self.failed} failed")


def _scheduler_status(sccache: str, env: dict[str, str]) -> str:
    """What the scheduler says through sccache (`--dist-status`), in a few words."""
    proc = capture([sccache, "--dist-status"], env={**os.environ, **env}, timeout=60)
    try:
        answer = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return (proc.stderr or proc.stdout).strip()[-200:] or "no answer"
    if isinstance(answer, dict) and "SchedulerStatus" in answer:
        info = answer["SchedulerStatus"][1]
        return f"{info.get('num_servers', 0)} build servers, {info.get('num_cpus', 0)} cores"
    if isinstance(answer, dict) and len(answer) == 1:  # {"NotConnected": [url, why]}, {"Disabled": why}
        (state, detail), = answer.items()
        why = detail[-1] if isinstance(detail, list) and detail else detail
        return f"scheduler {state}: {why}"[:200]
    return json.dumps(answer)[:200]


@contextmanager
def session(dist: Dist, sccache: str) -> Iterator[Session]:
    """An sccache server of this build's own, configured for `dist`, for the duration."""
    folder = Path(tempfile.mkdtemp(prefix="kbuild-dist-"))  # private (0700): it may hold the token
    env = {"SCCACHE_SERVER_PORT": str(_free_port()), "SCCACHE_IDLE_TIMEOUT": str(IDLE_S)}
    if os.environ.get("SCCACHE_SERVER_UDS"):  # a socket of the user's server wins over a port
        env["SCCACHE_SERVER_UDS"] = str(folder / "server.sock")
    if dist.given:
        conf = folder / "sccache.toml"
        conf.write_text(_client_config(dist), encoding="utf-8")
        conf.chmod(stat.S_IRUSR | stat.S_IWUSR)
        env["SCCACHE_CONF"] = str(conf)
    elif dist.config:
        env["SCCACHE_CONF"] = str(dist.config)
    started = False
    try:
        proc = capture([sccache, "--start-server"], env={**os.environ, **env}, timeout=120)
        if proc.returncode:
            raise BuildError("sccache could not start a server for distributed compiles: "
                             + scrub((proc.stderr or proc.stdout).strip(), dist)[-500:],
                             hint=f"check the scheduler settings ({dist.config or SCHEDULER_VAR})")
        started = True
        yield Session(sccache, dist, env, scrub(_scheduler_status(sccache, env), dist))
    finally:
        if started:
            capture([sccache, "--stop-server"], env={**os.environ, **env}, timeout=60)
        shutil.rmtree(folder, ignore_errors=True)
