"""The signature of a variant: `metadata.json.sigstore` beside its `metadata.json`, a Sigstore
bundle over the exact bytes of `metadata.json` (what `kernels.verify.verify_variant` reads).

Read here without any network: whether it parses as a bundle (sigstore-python's own parser) and
whether it signs the current bytes. Whether it *verifies* (certificate chain, transparency log,
signer identity) is publish/verify.py's; a current bundle is not yet a trusted one.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from .layout import METADATA, SIGNATURE

MISSING, INVALID, STALE, CURRENT = "missing", "invalid", "stale", "current"


@dataclass(frozen=True)
class SignatureState:
    status: str      # missing | invalid | stale | current
    reason: str = ""  # why invalid or stale

    @property
    def current(self) -> bool:
        return self.status == CURRENT


def signed_digest(text: bytes) -> bytes | None:
    """The sha256 a bundle says it signs: its message digest, else its hashedrekord log entry's
    (None: neither, e.g. a DSSE envelope, which the loader does not accept)."""
    doc = json.loads(text)
    digest = ((doc.get("messageSignature") or {}).get("messageDigest") or {})
    if digest.get("digest") and digest.get("algorithm", "SHA2_256") == "SHA2_256":
        return base64.b64decode(digest["digest"])
    for entry in (doc.get("verificationMaterial") or {}).get("tlogEntries") or []:
        body = json.loads(base64.b64decode(entry.get("canonicalizedBody", "")))
        value = (((body.get("spec") or {}).get("data") or {}).get("hash") or {})
        if body.get("kind") == "hashedrekord" and value.get("algorithm") == "sha256":
            return bytes.fromhex(value["value"])
    return None


def signature_state(variant: Path) -> SignatureState:
    """The state of `variant`'s signature bundle against its current `metadata.json`."""
    path = variant / SIGNATURE
    if not path.is_file():
        return SignatureState(MISSING)
    from sigstore.models import Bundle  # the loader's own parser (imported only when signed)
    try:
        text = path.read_bytes()
        Bundle.from_json(text)
        digest = signed_digest(text)
    except Exception as exc:  # untrusted bytes: any failure to read them is "invalid"
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return SignatureState(INVALID, f"not a Sigstore bundle the loader can read: {reason}")
    if digest is None:
        return SignatureState(INVALID, "signs no message digest (the loader verifies a "
                                       "signature over metadata.json's bytes)")
    try:
        current = hashlib.sha256((variant / METADATA).read_bytes()).digest()
    except OSError:
        return SignatureState(STALE, "metadata.json is missing")
    if digest != current:
        return SignatureState(STALE, "it signs other bytes than the current metadata.json "
                                     "(rebuilt or edited after signing)")
    return SignatureState(CURRENT)


def drop_unless_current(variant: Path) -> bool:
    """Removes a bundle that does not sign the current metadata.json; whether one was removed."""
    if signature_state(variant).status in (INVALID, STALE):
        (variant / SIGNATURE).unlink(missing_ok=True)
        return True
    return False
