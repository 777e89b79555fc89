"""The signature of a variant: `metadata.json.sigstore` beside its `metadata.json`, a Sigstore
bundle over the exact bytes of `metadata.json` (what `kernels.verify.verify_variant` reads).

Read here without any network or trust root: whether it parses as a bundle (sigstore-python's
own parser), whether it signs the current bytes, and whether its signature verifies over those
bytes with the key of the certificate it holds. Whether that certificate is trusted (its chain
to Fulcio, the transparency log, the signer's identity) is publish/verify.py's: a current bundle
is not yet a trusted one.

Every bundle kbuild reads (check, verify, sign, upload) goes through `read_bundle`, which refuses
one over `MAX_BUNDLE` bytes before reading it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from .layout import METADATA, SIGNATURE

# A Sigstore bundle holds a certificate chain (a few KB), one signature, and a log entry with
# its inclusion proof (one 32-byte hash per level of the log's tree: under 3 KB for any log of
# 2^64 entries) and checkpoint, maybe a timestamp: a real one is 3-10 KB (Sigstore's production
# bundle of a GitHub workflow: 10,040 bytes). 1 MiB is a hundred times that, and small enough
# that reading and parsing it costs nothing.
MAX_BUNDLE = 1 << 20

MISSING, INVALID, STALE, CURRENT = "missing", "invalid", "stale", "current"


@dataclass(frozen=True)
class SignatureState:
    status: str      # missing | invalid | stale | current
    reason: str = ""  # why invalid or stale

    @property
    def current(self) -> bool:
        return self.status == CURRENT


class BundleUnreadable(Exception):
    """A bundle file that is not read: too large, or not a regular file."""

    def __init__(self, name: str, why: str) -> None:
        super().__init__(f"{name} {why}")
        self.why = why  # the message without the file's name


def read_bundle(path: Path) -> bytes:
    """The bytes of the bundle at `path`, at most MAX_BUNDLE of them; BundleUnreadable when it is
    larger (said before reading it) or not a regular file (a FIFO is not waited on)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise BundleUnreadable(path.name, "is not a regular file")
        if info.st_size > MAX_BUNDLE:
            raise BundleUnreadable(path.name, f"is {info.st_size} bytes, more than the 1 MiB "
                                              f"({MAX_BUNDLE} bytes) a Sigstore bundle may be")
        data = f.read(MAX_BUNDLE + 1)
    if len(data) > MAX_BUNDLE:  # grew while being read
        raise BundleUnreadable(path.name, f"is more than the 1 MiB ({MAX_BUNDLE} bytes) a "
                                          "Sigstore bundle may be")
    return data


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


def signature_verifies(certificate, signature: bytes, data: bytes) -> bool:
    """Whether `signature` verifies over the sha256 of `data` with the public key of
    `certificate` (cryptography's x509): sigstore-python's step 7 of `Verifier.verify_artifact`,
    the one that needs no trust root (sigstore signs with ECDSA over the prehashed digest)."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.utils import Prehashed
    key = certificate.public_key()
    if not isinstance(key, ec.EllipticCurvePublicKey):
        return False
    try:
        key.verify(signature, hashlib.sha256(data).digest(), ec.ECDSA(Prehashed(hashes.SHA256())))
    except InvalidSignature:
        return False
    return True


def bundle_state(text: bytes, data: bytes) -> SignatureState:
    """The state of the bundle `text` against the artifact `data` (never MISSING)."""
    from sigstore.models import Bundle  # the loader's own parser (imported only when signed)
    try:
        bundle = Bundle.from_json(text)
        digest = signed_digest(text)
    except Exception as exc:  # untrusted bytes: any failure to read them is "invalid"
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return SignatureState(INVALID, f"not a Sigstore bundle the loader can read: {reason}")
    if digest is None:
        return SignatureState(INVALID, "signs no message digest (the loader verifies a "
                                       "signature over metadata.json's bytes)")
    if digest != hashlib.sha256(data).digest():
        return SignatureState(STALE, "it signs other bytes than the current metadata.json "
                                     "(rebuilt or edited after signing)")
    try:
        signature = base64.b64decode(json.loads(text)["messageSignature"]["signature"])
        verifies = signature_verifies(bundle.signing_certificate, signature, data)
    except Exception:  # no message signature, not base64, a key that cannot be read
        verifies = False
    if not verifies:
        return SignatureState(INVALID, "its signature does not verify over metadata.json's bytes "
                                       "with its certificate's key")
    return SignatureState(CURRENT)


def signature_state(variant: Path) -> SignatureState:
    """The state of `variant`'s signature bundle against its current `metadata.json`."""
    path = variant / SIGNATURE
    if not path.is_file():
        return SignatureState(MISSING)
    try:
        text = read_bundle(path)
    except BundleUnreadable as exc:
        return SignatureState(INVALID, exc.why)
    except OSError as exc:
        return SignatureState(INVALID, f"cannot be read: {exc.strerror or exc}")
    try:
        current = (variant / METADATA).read_bytes()
    except OSError:
        return SignatureState(STALE, "metadata.json is missing")
    return bundle_state(text, current)


def drop_unless_current(variant: Path) -> bool:
    """Removes a bundle that does not sign the current metadata.json; whether one was removed."""
    if signature_state(variant).status in (INVALID, STALE):
        (variant / SIGNATURE).unlink(missing_ok=True)
        return True
    return False
