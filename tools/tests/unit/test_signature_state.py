"""core/signature.py: a variant's metadata.json.sigstore read without network, and judged against
the current metadata.json. Bundles made by sigstore-python against the stand-in Sigstore
(in-process threads on 127.0.0.1)."""

from __future__ import annotations

import base64
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from kbuild.core.signature import (CURRENT, INVALID, MISSING, STALE, BundleUnreadable,
                                   bundle_state, drop_unless_current, read_bundle,
                                   signature_state, signed_digest)

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


# ----------------------------------------------------------------------------- the signature itself

REPO_ROOT = Path(__file__).resolve().parents[3]
SHARED = Path(os.environ.get("KBUILD_TEST_SHARED") or REPO_ROOT.parent / "shared") / "sigstore"


def with_signature(bundle: str, change) -> str:
    """The bundle with its signature bytes changed by `change`, its claimed digest kept."""
    doc = json.loads(bundle)
    signature = bytearray(base64.b64decode(doc["messageSignature"]["signature"]))
    doc["messageSignature"]["signature"] = base64.b64encode(bytes(change(signature))).decode()
    return json.dumps(doc)


def flip_last(data: bytearray) -> bytearray:
    data[-1] ^= 1
    return data


@pytest.mark.parametrize("change", [flip_last, lambda d: d[:-4], lambda d: bytearray(8)])
def test_a_signature_that_does_not_verify_is_invalid_though_its_digest_is_right(
        tmp_path, bundle_json, change):
    altered = with_signature(bundle_json, change)
    assert signed_digest(altered.encode()) == signed_digest(bundle_json.encode())  # claimed: right
    state = signature_state(variant(tmp_path, altered))
    assert state.status == INVALID
    assert state.reason == ("its signature does not verify over metadata.json's bytes with its "
                            "certificate's key")


def test_a_signature_under_another_certificate_is_invalid(tmp_path, bundle_json):
    """The signature and digest of one signing, the certificate (key) of another."""
    from sigstore.models import ClientTrustConfig
    from sigstore.oidc import IdentityToken
    from sigstore.sign import SigningContext
    with StandInSigstore() as standin:
        token = IdentityToken(standin.mint_token("sigstore"))
        config = ClientTrustConfig.from_json(json.dumps(standin.trust_config()))
        with SigningContext.from_trust_config(config).signer(token) as signer:
            other = json.loads(signer.sign_artifact(META).to_json())
    doc = json.loads(bundle_json)
    doc["verificationMaterial"]["certificate"] = other["verificationMaterial"]["certificate"]
    state = signature_state(variant(tmp_path, json.dumps(doc)))
    assert state.status == INVALID and "does not verify" in state.reason


@pytest.fixture
def production_bundle() -> tuple[bytes, bytes]:
    """A bundle made by Sigstore's production instance, and the artifact it signs."""
    if not (SHARED / "bundle_v3_github.whl.sigstore").is_file():
        pytest.skip(f"the real Sigstore bundle is test data beside the checkout ({SHARED}, "
                    "README there), absent here")
    return ((SHARED / "bundle_v3_github.whl.sigstore").read_bytes(),
            (SHARED / "bundle_v3_github.whl").read_bytes())


def test_a_real_production_bundle_passes_the_offline_signature_check(tmp_path, production_bundle):
    bundle, artifact = production_bundle
    assert bundle_state(bundle, artifact).status == CURRENT
    assert signature_state(variant(tmp_path / "a", bundle.decode(), artifact)).status == CURRENT
    altered = with_signature(bundle.decode(), flip_last).encode()
    assert bundle_state(altered, artifact).status == INVALID
    assert bundle_state(bundle, artifact + b"\0").status == STALE


# ----------------------------------------------------------------------------- size

def huge(path: Path, size: int = (64 << 20) + 1) -> int:
    with open(path, "wb") as f:  # sparse: no disk, no time
        f.truncate(size)
    return size


def test_a_huge_bundle_is_one_line_and_is_not_read(tmp_path):
    folder = variant(tmp_path, None)
    size = huge(folder / "metadata.json.sigstore")
    state = signature_state(folder)
    assert (state.status, state.reason) == (INVALID, f"is {size} bytes, more than the 1 MiB "
                                                     f"(1048576 bytes) a Sigstore bundle may be")
    from kbuild.stages.check import signature_problems
    (problem,) = signature_problems(SimpleNamespace(path=folder))
    assert str(problem) == f"signature: metadata.json.sigstore {state.reason}"
    with pytest.raises(BundleUnreadable) as caught:
        read_bundle(folder / "metadata.json.sigstore")
    assert str(caught.value) == f"metadata.json.sigstore {state.reason}"


def test_a_bundle_that_is_not_a_regular_file_is_not_opened(tmp_path):
    folder = variant(tmp_path, None)
    os.mkfifo(folder / "metadata.json.sigstore")  # opening it to read would wait for a writer
    with pytest.raises(BundleUnreadable, match="is not a regular file"):
        read_bundle(folder / "metadata.json.sigstore")


def test_verify_sign_and_upload_read_bundles_through_the_same_reader(tmp_path, bundle_json):
    from kbuild.core.errors import BuildError
    from kbuild.publish.sign import require_signed
    from kbuild.publish.verify import verify_file, verify_variant
    folder = variant(tmp_path / "a", None)
    size = huge(folder / "metadata.json.sigstore")
    too_big = f"is {size} bytes, more than the 1 MiB (1048576 bytes) a Sigstore bundle may be"
    verdict = verify_variant(folder, None, None)  # refused before any verifier is used
    assert (verdict.ok, verdict.text) == (False, f"metadata.json.sigstore {too_big}")
    artifact = tmp_path / "artifact.bin"
    artifact.write_bytes(META)
    huge(tmp_path / "artifact.bin.sigstore")
    verdict = verify_file(artifact, None, None)
    assert (verdict.ok, verdict.text) == (False, f"artifact.bin.sigstore {too_big}")
    with pytest.raises(BuildError, match=r"torch-cpu \(invalid\)"):
        require_signed([SimpleNamespace(name="torch-cpu", path=folder)], {})
    # upload --require-signature: a bundle whose signature does not verify is refused
    altered = variant(tmp_path / "b", with_signature(bundle_json, flip_last))
    with pytest.raises(BuildError, match=r"torch-cpu \(invalid\)"):
        require_signed([SimpleNamespace(name="torch-cpu", path=altered)], {})
