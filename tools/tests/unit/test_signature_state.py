"""core/signature.py: a variant's metadata.json.sigstore read without network, and judged against
the current metadata.json. Bundles made by sigstore-python against the stand-in Sigstore
(in-process threads on 127.0.0.1)."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import pytest

from kbuild.core.signature import (CURRENT, INVALID, MISSING, STALE, drop_unless_current,
                                   signature_state)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sigstore_standin import StandInSigstore  # noqa: E402

META = b'{"name": "demo", "id": "_demo_1", "version": 1}\n'


@pytest.fixture(scope="module")
def bundle_json() -> str:
    """A real bundle over META's bytes."""
    from sigstore.models import ClientTrustConfig
    from sigstore.oidc import IdentityToken
    from sigstore.sign import SigningContext
    with StandInSigstore() as standin:
        token = IdentityToken(standin.mint_token("sigstore"))
        config = ClientTrustConfig.from_json(json.dumps(standin.trust_config()))
        with SigningContext.from_trust_config(config).signer(token) as signer:
            return signer.sign_artifact(META).to_json()


def variant(tmp_path: Path, bundle: str | None, meta: bytes = META) -> Path:
    folder = tmp_path / "torch-cpu"
    folder.mkdir(parents=True)
    (folder / "metadata.json").write_bytes(meta)
    if bundle is not None:
        (folder / "metadata.json.sigstore").write_text(bundle)
    return folder


def test_current_missing_and_stale(tmp_path, bundle_json):
    assert signature_state(variant(tmp_path / "a", bundle_json)).status == CURRENT
    assert signature_state(variant(tmp_path / "b", None)).status == MISSING
    stale = signature_state(variant(tmp_path / "c", bundle_json, META.replace(b"1}", b"2}")))
    assert stale.status == STALE and "other bytes" in stale.reason


def test_without_a_message_digest_the_log_entry_says_what_is_signed(tmp_path, bundle_json):
    doc = json.loads(bundle_json)
    del doc["messageSignature"]["messageDigest"]
    assert signature_state(variant(tmp_path / "a", json.dumps(doc))).status == CURRENT
    assert signature_state(variant(tmp_path / "b", json.dumps(doc), b"{}")).status == STALE


def signs_nothing(doc: dict) -> str:
    """No message digest, and a log entry that is no hashedrekord: nothing over metadata.json."""
    material = doc["verificationMaterial"]
    entry = {**material["tlogEntries"][0],
             "canonicalizedBody": base64.b64encode(b'{"kind": "dsse"}').decode()}
    signature = {"signature": doc["messageSignature"]["signature"]}
    return json.dumps({**doc, "messageSignature": signature,
                       "verificationMaterial": {**material, "tlogEntries": [entry]}})


@pytest.mark.parametrize("mangle", [
    lambda doc: "not json",
    lambda doc: json.dumps({**doc, "mediaType": "application/x-other"}),
    lambda doc: json.dumps({**doc, "verificationMaterial": "x"}),
    lambda doc: json.dumps({k: v for k, v in doc.items() if k != "verificationMaterial"}),
    signs_nothing,
])
def test_unreadable_or_signing_nothing_is_invalid(tmp_path, bundle_json, mangle):
    state = signature_state(variant(tmp_path, mangle(json.loads(bundle_json))))
    assert state.status == INVALID
    expected = "signs no message digest" if mangle is signs_nothing else "not a Sigstore bundle"
    assert state.reason.startswith(expected)


def test_drop_unless_current(tmp_path, bundle_json):
    kept = variant(tmp_path / "a", bundle_json)
    assert not drop_unless_current(kept) and (kept / "metadata.json.sigstore").is_file()
    stale = variant(tmp_path / "b", bundle_json, b"{}")
    assert drop_unless_current(stale) and not (stale / "metadata.json.sigstore").exists()
    broken = variant(tmp_path / "c", "{")
    assert drop_unless_current(broken) and not (broken / "metadata.json.sigstore").exists()
    assert not drop_unless_current(variant(tmp_path / "d", None))
