"""Endpoints: a malformed one is one clean error before anything imports huggingface_hub, and
no URL credentials or token ever reach what publish/ prints."""

from __future__ import annotations

import pytest

from kbuild.core.errors import BuildError
from kbuild.publish import hub as hub_mod
from kbuild.publish import upload as upload_mod
from kbuild.publish import wheel as wheel_mod

SECRET = "hf_userinfo_secret_7d1"


@pytest.mark.parametrize("url", ["http://[::1", f"http://u:{SECRET}@[::1", "ftp://x", "notaurl",
                                 "http://127.0.0.1:99999", "http://:80"])
def test_malformed_hf_endpoint_is_one_clean_error(url, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_ENDPOINT", url)
    for call in (lambda: upload_mod.upload(tmp_path / "no-project"),
                 lambda: wheel_mod.to_wheels(tmp_path / "no-build", out=tmp_path / "dist"),
                 lambda: hub_mod.check_endpoint(None)):
        with pytest.raises(BuildError) as err:
            call()
        assert err.value.key == "HF_ENDPOINT" and SECRET not in str(err.value)
    monkeypatch.delenv("HF_ENDPOINT")
    with pytest.raises(BuildError) as err:
        hub_mod.check_endpoint(url)
    assert err.value.key == "endpoint" and SECRET not in str(err.value)


def test_valid_endpoints_pass(monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "")
    for url in (None, "http://127.0.0.1:8080", "https://huggingface.co", "http://[::1]:80",
                f"https://u:{SECRET}@hub.example.invalid"):
        hub_mod.check_endpoint(url)


def test_scrub_removes_userinfo_and_token():
    scrub = hub_mod.Scrub("hf_the_token")
    text = (f"cannot reach http://user:{SECRET}@127.0.0.1:9/api (x), also "
            f"https://{SECRET}@h/x, http://a:b@c@d/e?q=http://x and hf_the_token")
    out = scrub(text)
    assert SECRET not in out and "hf_the_token" not in out and "b@c" not in out
    assert "http://***@127.0.0.1:9/api" in out and "https://***@h/x" in out
    assert scrub("no url here") == "no url here"


def test_unreachable_endpoint_with_userinfo_never_prints_it(capfd, caplog):
    from kbuild_hub import HubServer
    with HubServer() as server:
        port = server.url.rsplit(":", 1)[1]  # nobody listens there once stopped
    logs: list[str] = []
    client = hub_mod.HubClient("org/k", endpoint=f"http://user:{SECRET}@127.0.0.1:{port}",
                               token=None, log=logs.append, retries=1, backoff=0.01)
    with pytest.raises(BuildError) as err:
        client.exists()
    assert "cannot reach http://***@127.0.0.1" in str(err.value)
    captured = capfd.readouterr()
    everything = str(err.value) + "".join(logs) + captured.out + captured.err + caplog.text
    assert SECRET not in everything


@pytest.mark.parametrize("version, refused", [("2.2.0", True), ("1.33.0", True), ("2.3.0", False),
                                              ("2.4.0rc1", False), ("3.0.0", False)])
def test_a_client_that_cannot_commit_to_kernel_repos_is_one_clean_error(monkeypatch, version, refused):
    import huggingface_hub
    monkeypatch.setattr(huggingface_hub, "__version__", version)
    if not refused:
        hub_mod.check_client()
        return
    with pytest.raises(BuildError) as e:
        hub_mod.check_client()
    assert version in e.value.message and "huggingface_hub>=2.3" in e.value.hint
