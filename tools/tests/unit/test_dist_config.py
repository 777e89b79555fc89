"""Which scheduler of distributed compiles a build uses (stages/compile/dist.py): --dist-scheduler with
the token in KBUILD_DIST_TOKEN, else the user's sccache configuration; bad settings refused with
one message; sccache chosen as the compiler launcher then."""

from __future__ import annotations

import tomllib

import pytest

from kbuild.core.errors import BuildError
from kbuild.stages import compile as compile_mod
from kbuild.stages.compile import dist


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    for var in (dist.SCHEDULER_VAR, dist.TOKEN_VAR, "SCCACHE_CONF", "KBUILD_COMPILER_CACHE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))  # no user configuration


def test_nothing_configured_means_local_compiles():
    assert dist.configured() is None
    assert dist.for_launcher("/usr/bin/ccache") is None


def test_the_scheduler_option_needs_the_token(monkeypatch):
    monkeypatch.setenv(dist.SCHEDULER_VAR, "http://10.0.0.5:10600")
    with pytest.raises(BuildError, match=dist.TOKEN_VAR) as e:
        dist.configured()
    assert dist.TOKEN_VAR in e.value.hint
    monkeypatch.setenv(dist.TOKEN_VAR, " secret ")
    assert dist.configured() == dist.Dist("http://10.0.0.5:10600", True, None, "secret")


@pytest.mark.parametrize("url", ["10.0.0.5:10600", "ftp://host", "http://", "https:///x"])
def test_a_scheduler_that_is_no_url_is_refused(monkeypatch, url):
    monkeypatch.setenv(dist.SCHEDULER_VAR, url)
    monkeypatch.setenv(dist.TOKEN_VAR, "t")
    with pytest.raises(BuildError, match="is not an http:// or https:// URL"):
        dist.configured()


def test_the_users_sccache_configuration_names_the_scheduler(monkeypatch, tmp_path):
    conf = tmp_path / "xdg" / "sccache" / "config"
    conf.parent.mkdir(parents=True)
    conf.write_text('[dist]\nscheduler_url = "https://sched.example:443"\n[dist.auth]\ntype = "token"\n'
                    'token = "mine"\n')
    assert dist.configured() == dist.Dist("https://sched.example:443", False, conf)
    other = tmp_path / "other.toml"
    other.write_text("[cache.disk]\ndir = '/x'\n")  # SCCACHE_CONF wins, and has no [dist]
    monkeypatch.setenv("SCCACHE_CONF", str(other))
    assert dist.configured() is None
    other.write_text("[dist\n")
    monkeypatch.setenv(dist.SCHEDULER_VAR, "http://h:1")
    with pytest.raises(BuildError, match="not valid TOML") as e:
        dist.configured()
    assert e.value.file == other


def test_the_option_with_the_users_configuration_keeps_its_settings(monkeypatch, tmp_path):
    conf = tmp_path / "conf.toml"
    conf.write_text('[dist]\nscheduler_url = "http://old:1"\ncache_dir = "/tc"\n'
                    '[cache.disk]\ndir = "/cache"\n')
    monkeypatch.setenv("SCCACHE_CONF", str(conf))
    monkeypatch.setenv(dist.SCHEDULER_VAR, "http://new:2")
    monkeypatch.setenv(dist.TOKEN_VAR, "tok")
    written = tomllib.loads(dist._client_config(dist.configured()))
    assert written["dist"] == {"scheduler_url": "http://new:2", "cache_dir": "/tc", "toolchains": [],
                               "auth": {"type": "token", "token": "tok"}}
    assert written["cache"] == {"disk": {"dir": "/cache"}}


def test_a_configured_scheduler_makes_sccache_the_launcher(monkeypatch, tmp_path):
    tools = {name: tmp_path / name for name in ("ccache", "sccache")}
    for t in tools.values():
        t.write_text("")
    monkeypatch.setattr(compile_mod, "cache_tool", lambda name: str(tools[name]) if name in tools else None)
    assert compile_mod.compiler_launcher() == str(tools["ccache"])
    monkeypatch.setenv(dist.SCHEDULER_VAR, "http://h:1")
    monkeypatch.setenv(dist.TOKEN_VAR, "t")
    launcher = compile_mod.compiler_launcher()
    assert launcher == str(tools["sccache"]) and dist.for_launcher(launcher).scheduler == "http://h:1"
    monkeypatch.setenv("KBUILD_COMPILER_CACHE", "ccache")  # an explicit other choice: refused
    with pytest.raises(BuildError, match="distributed compiles go through sccache"):
        dist.for_launcher(compile_mod.compiler_launcher())


def test_the_report_names_the_servers():
    counts = dist.DistCounts("http://s:1", {"10.0.0.2:10501": 3, "10.0.0.1:10501": 9}, 0)
    assert str(counts) == ("distributed compiles (http://s:1): 12 on 2 build servers "
                           "(10.0.0.1:10501: 9, 10.0.0.2:10501: 3), 0 failed")
    none = dist.DistCounts("http://s:1", {}, 0, "0 build servers, 0 cores")
    assert str(none) == ("distributed compiles (http://s:1): none, every compile ran here "
                         "(0 build servers, 0 cores)")


def test_with_no_compiler_cache_the_users_sccache_configuration_is_not_read(monkeypatch, tmp_path):
    """KBUILD_COMPILER_CACHE=none (or ccache) compiles without sccache: its configuration, even
    broken, is not read; where sccache is used, `dist = 5` is one error naming file and key."""
    conf = tmp_path / "conf.toml"
    monkeypatch.setenv("SCCACHE_CONF", str(conf))
    monkeypatch.setenv("KBUILD_COMPILER_CACHE", "none")
    for text in ("[dist\n", "dist = 5\n"):
        conf.write_text(text)
        assert compile_mod.compiler_launcher() is None and dist.for_launcher(None) is None
        assert dist.for_launcher("/usr/bin/ccache") is None
    with pytest.raises(BuildError, match=r"`dist` must be a table") as e:
        dist.for_launcher("/usr/bin/sccache")
    assert e.value.file == conf and e.value.key == "dist"
    monkeypatch.setenv("KBUILD_COMPILER_CACHE", "auto")  # auto looks for a scheduler: one error
    with pytest.raises(BuildError, match=r"`dist` must be a table"):
        compile_mod.compiler_launcher()


def test_scheduler_credentials_are_never_shown(monkeypatch, tmp_path):
    """A password in the scheduler's URL and the client token appear neither in the refusal of
    a bad URL, nor in the build's summary, nor in what sccache's errors are relayed with (its
    parse errors quote the offending line of the configuration)."""
    monkeypatch.setenv(dist.SCHEDULER_VAR, "http://alice:PASS@sched:port")
    monkeypatch.setenv(dist.TOKEN_VAR, "t0ken")
    with pytest.raises(BuildError, match="is not an http:// or https:// URL") as e:
        dist.configured()
    assert "PASS" not in str(e.value) and "alice" not in str(e.value)
    monkeypatch.setenv(dist.SCHEDULER_VAR, "http://alice:PASS@sched:10600")
    given = dist.configured()
    monkeypatch.setattr(dist.Session, "stats", lambda self: {"dist_compiles": {"10.0.0.1:1": 2}})
    assert str(dist.Session("sccache", given).counts()) == \
        "distributed compiles (http://sched:10600): 2 on 1 build server (10.0.0.1:1: 2), 0 failed"
    conf = tmp_path / "conf.toml"
    conf.write_text('[dist]\nscheduler_url = "http://bob:hunter2@sched:10600"\n'
                    'auth = { type = "token", token = "s3cr3t" }\n')
    monkeypatch.setenv("SCCACHE_CONF", str(conf))
    given = dist.configured()  # --dist-scheduler, with the user's configuration merged in
    monkeypatch.delenv(dist.SCHEDULER_VAR)
    said = ('sccache: error: failed to parse config: TOML parse error at line 3\n  |\n'
            '3 | auth = { type = "token", token = "s3cr3t" }\n'
            'scheduler http://bob:hunter2@sched:10600 with token t0ken, s3cr3t\n')
    import subprocess
    monkeypatch.setattr(dist, "capture", lambda args, **kw: subprocess.CompletedProcess(args, 1, "", said))
    for d in (dist.configured(), given):
        with pytest.raises(BuildError, match="sccache could not start a server") as e:
            with dist.session(d, "sccache"):
                pass
        shown = str(e.value)
        for secret in ("hunter2", "s3cr3t", "t0ken", "PASS", "bob", "alice"):
            assert secret not in shown, (secret, shown)
        assert 'token = "***"' in shown and "http://sched:10600" in shown
