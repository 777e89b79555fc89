"""A stand-in for GitHub's OIDC token endpoint, Fulcio and Rekor (v1) on 127.0.0.1, faithful
enough for sigstore-python's own, unmodified signing and verification (a test fixture, never
shipped). What sigstore-python insists on, and this serves:

- GitHub Actions' token endpoint (`ACTIONS_ID_TOKEN_REQUEST_URL`, bearer
  `ACTIONS_ID_TOKEN_REQUEST_TOKEN`): a signed JWT (ES256) with GitHub's claims for one
  repository, workflow and ref, issuer `https://token.actions.githubusercontent.com`.
- Fulcio (`POST /api/v2/signingCert`): checks the JWT's signature, audience and lifetime and the
  CSR's proof of possession, and issues a 10-minute code-signing certificate from an
  intermediate CA, with Fulcio's OIDC extensions (issuer, source repository, build signer URI,
  ...) and an embedded precertificate SCT signed by a CT log key of the trusted root.
- Rekor v1 (`POST /api/v1/log/entries`): checks the hashedrekord's signature against its
  certificate, appends the canonical body to an RFC 6962 Merkle tree (already holding other
  entries), and answers with the inclusion proof, a signed checkpoint and the signed entry
  timestamp (SET).

`trust_config()` is the `ClientTrustConfig` JSON naming all of it (kbuild's `--trust-config`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import struct
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

# The builder and its test extra bring these; an image without them (the GPU machine's) skips
# the tests that use the stand-in, saying which is missing.
for _needed in ("cryptography.x509", "jwt", "rfc8785"):
    pytest.importorskip(_needed, reason=f"{_needed} (the builder's test extra) is not importable")

import jwt  # noqa: E402
import rfc8785  # noqa: E402
from cryptography import x509  # noqa: E402
from cryptography.hazmat import asn1  # noqa: E402
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.hazmat.primitives.asymmetric.utils import Prehashed  # noqa: E402
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # noqa: E402

GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
AUDIENCE = "sigstore"
START = "2020-01-01T00:00:00Z"  # validFor.start of every key and service


def _spki(key) -> bytes:
    """DER SubjectPublicKeyInfo of a key (private keys give their public half)."""
    key = key.public_key() if hasattr(key, "private_numbers") else key
    return key.public_bytes(serialization.Encoding.DER,
                            serialization.PublicFormat.SubjectPublicKeyInfo)


def _key_id(key) -> bytes:
    return hashlib.sha256(_spki(key)).digest()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


# ----------------------------------------------------------------------------- RFC 6962 Merkle tree


def _leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def _node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than n (n > 1)."""
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def tree_root(leaves: list[bytes]) -> bytes:
    if len(leaves) == 1:
        return leaves[0]
    k = _split(len(leaves))
    return _node(tree_root(leaves[:k]), tree_root(leaves[k:]))


def audit_path(m: int, leaves: list[bytes]) -> list[bytes]:
    """RFC 6962 PATH(m, D[n]): the sibling hashes from the leaf up."""
    if len(leaves) == 1:
        return []
    k = _split(len(leaves))
    if m < k:
        return audit_path(m, leaves[:k]) + [tree_root(leaves[k:])]
    return audit_path(m - k, leaves[k:]) + [tree_root(leaves[:k])]


# ----------------------------------------------------------------------------- the services


class StandInSigstore:
    """The three services on one 127.0.0.1 port; `identity(...)` sets whose tokens it mints.
    `certificates` and `entries` record what Fulcio issued and Rekor logged."""

    def __init__(self, *, repository: str = "kbuild-test/img2gray",
                 workflow: str = ".github/workflows/build-variants.yml",
                 ref: str = "refs/heads/main", prefill: int = 5):
        self.request_token = "ghs_standin_" + secrets.token_hex(8)
        self.oidc_key = ec.generate_private_key(ec.SECP256R1())
        self.root_key = ec.generate_private_key(ec.SECP384R1())
        self.intermediate_key = ec.generate_private_key(ec.SECP384R1())
        self.ct_key = ec.generate_private_key(ec.SECP256R1())
        self.rekor_key = ec.generate_private_key(ec.SECP256R1())
        self.root_cert, self.intermediate_cert = self._cas()
        self.tree_id = str(int.from_bytes(secrets.token_bytes(7), "big"))
        self.leaves: list[bytes] = [_leaf_hash(secrets.token_bytes(32)) for _ in range(prefill)]
        self.certificates: list[x509.Certificate] = []
        self.entries: list[dict] = []
        self.tokens_minted = 0
        self.refuse: set[str] = set()  # paths answered with 503, as a service that is down
        self.lock = threading.Lock()
        self.identity(repository, workflow, ref)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread: threading.Thread | None = None

    # -- set-up

    def identity(self, repository: str, workflow: str, ref: str) -> None:
        """The GitHub repository (owner/name), workflow path and ref of the tokens minted next."""
        self.repository, self.workflow, self.ref = repository, workflow, ref

    @property
    def signer_uri(self) -> str:
        return f"https://github.com/{self.repository}/{self.workflow}@{self.ref}"

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> "StandInSigstore":
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def github_env(self) -> dict[str, str]:
        """What a GitHub Actions job with `id-token: write` has in its environment."""
        return {"GITHUB_ACTIONS": "true", "ACTIONS_ID_TOKEN_REQUEST_TOKEN": self.request_token,
                "ACTIONS_ID_TOKEN_REQUEST_URL": f"{self.url}/oidc/token?api-version=2.0"}

    def _cas(self) -> tuple[x509.Certificate, x509.Certificate]:
        now = datetime.now(timezone.utc)

        def ca(subject: str, key, issuer_name: x509.Name, issuer_key, path_length: int | None):
            name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kbuild-test"),
                              x509.NameAttribute(NameOID.COMMON_NAME, subject)])
            builder = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer_name or name)
                       .public_key(key.public_key()).serial_number(x509.random_serial_number())
                       .not_valid_before(now - timedelta(days=1))
                       .not_valid_after(now + timedelta(days=30))
                       .add_extension(x509.BasicConstraints(ca=True, path_length=path_length), True)
                       .add_extension(x509.KeyUsage(
                           digital_signature=False, content_commitment=False,
                           key_encipherment=False, data_encipherment=False, key_agreement=False,
                           key_cert_sign=True, crl_sign=True, encipher_only=False,
                           decipher_only=False), True)
                       .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]),
                                      False)
                       .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                                      False))
            if issuer_key is not key:
                builder = builder.add_extension(
                    x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
                    False)
            return builder.sign(issuer_key, hashes.SHA384())

        root = ca("sigstore-standin", self.root_key, None, self.root_key, 1)
        intermediate = ca("sigstore-standin-intermediate", self.intermediate_key, root.subject,
                          self.root_key, 0)
        return root, intermediate

    # -- trust

    def trust_config(self) -> dict:
        """The ClientTrustConfig (v0.1) of this instance: its trusted root and signing config."""
        def log(base_url: str, key) -> dict:
            return {"baseUrl": base_url, "hashAlgorithm": "SHA2_256",
                    "publicKey": {"rawBytes": _b64(_spki(key)),
                                  "keyDetails": "PKIX_ECDSA_P256_SHA_256",
                                  "validFor": {"start": START}},
                    "logId": {"keyId": _b64(_key_id(key))}}

        def service(url: str) -> dict:
            return {"url": url, "majorApiVersion": 1, "validFor": {"start": START},
                    "operator": "kbuild-test"}

        der = serialization.Encoding.DER
        root = {
            "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
            "tlogs": [log(self.url, self.rekor_key)],
            "certificateAuthorities": [{
                "subject": {"organization": "kbuild-test", "commonName": "sigstore-standin"},
                "uri": self.url,
                "certChain": {"certificates": [
                    {"rawBytes": _b64(c.public_bytes(der))}
                    for c in (self.intermediate_cert, self.root_cert)]},
                "validFor": {"start": START}}],
            "ctlogs": [log(f"{self.url}/ct", self.ct_key)],
            "timestampAuthorities": []}
        signing = {
            "mediaType": "application/vnd.dev.sigstore.signingconfig.v0.2+json",
            "caUrls": [service(self.url)], "oidcUrls": [service(f"{self.url}/oidc")],
            "rekorTlogUrls": [service(self.url)], "tsaUrls": [],
            "rekorTlogConfig": {"selector": "ANY"}, "tsaConfig": {"selector": "ANY"}}
        return {"mediaType": "application/vnd.dev.sigstore.clienttrustconfig.v0.1+json",
                "trustedRoot": root, "signingConfig": signing}

    def write_trust_config(self, path: Path) -> Path:
        path.write_text(json.dumps(self.trust_config(), indent=2))
        return path

    # -- GitHub's token endpoint

    def mint_token(self, audience: str) -> str:
        now = int(time.time())
        repo, ref = self.repository, self.ref
        owner = repo.split("/")[0]
        sha = hashlib.sha1(f"{repo}@{ref}".encode()).hexdigest()
        claims = {
            "iss": GITHUB_ISSUER, "aud": audience, "sub": f"repo:{repo}:ref:{ref}",
            "iat": now, "nbf": now - 5, "exp": now + 300, "jti": str(uuid.uuid4()),
            "repository": repo, "repository_id": "101", "repository_owner": owner,
            "repository_owner_id": "100", "repository_visibility": "public",
            "ref": ref, "ref_type": "tag" if ref.startswith("refs/tags/") else "branch",
            "sha": sha, "event_name": "push", "workflow": "build-variants",
            "workflow_ref": f"{repo}/{self.workflow}@{ref}", "workflow_sha": sha,
            "job_workflow_ref": f"{repo}/{self.workflow}@{ref}", "job_workflow_sha": sha,
            "run_id": "7", "run_attempt": "1", "runner_environment": "github-hosted"}
        with self.lock:
            self.tokens_minted += 1
        return jwt.encode(claims, self.oidc_key, algorithm="ES256")

    # -- Fulcio

    def issue(self, csr_pem: bytes, token: str) -> list[x509.Certificate]:
        claims = jwt.decode(token, self.oidc_key.public_key(), algorithms=["ES256"],
                            audience=AUDIENCE, issuer=GITHUB_ISSUER)
        csr = x509.load_pem_x509_csr(csr_pem)
        if not csr.is_signature_valid:
            raise ValueError("the CSR's signature (proof of possession) is invalid")
        now = datetime.now(timezone.utc).replace(microsecond=0)
        repo_url = f"https://github.com/{claims['repository']}"
        signer = f"https://github.com/{claims['job_workflow_ref']}"

        def raw(oid: int, value: str) -> x509.UnrecognizedExtension:
            return x509.UnrecognizedExtension(x509.ObjectIdentifier(f"1.3.6.1.4.1.57264.1.{oid}"),
                                              value.encode())

        def der(oid: int, value: str) -> x509.UnrecognizedExtension:
            return x509.UnrecognizedExtension(x509.ObjectIdentifier(f"1.3.6.1.4.1.57264.1.{oid}"),
                                              asn1.encode_der(value))

        extensions = [
            (x509.KeyUsage(digital_signature=True, content_commitment=False,
                           key_encipherment=False, data_encipherment=False, key_agreement=False,
                           key_cert_sign=False, crl_sign=False, encipher_only=False,
                           decipher_only=False), True),
            (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), False),
            (x509.SubjectKeyIdentifier.from_public_key(csr.public_key()), False),
            (x509.AuthorityKeyIdentifier.from_issuer_public_key(
                self.intermediate_key.public_key()), False),
            (x509.SubjectAlternativeName([x509.UniformResourceIdentifier(signer)]), True),
            (raw(1, claims["iss"]), False), (raw(2, claims["event_name"]), False),
            (raw(3, claims["sha"]), False), (raw(4, claims["workflow"]), False),
            (raw(5, claims["repository"]), False), (raw(6, claims["ref"]), False),
            (der(8, claims["iss"]), False), (der(9, signer), False),
            (der(10, claims["job_workflow_sha"]), False),
            (der(11, claims["runner_environment"]), False), (der(12, repo_url), False),
            (der(13, claims["sha"]), False), (der(14, claims["ref"]), False),
            (der(15, claims["repository_id"]), False),
            (der(16, f"https://github.com/{claims['repository_owner']}"), False),
            (der(17, claims["repository_owner_id"]), False),
            (der(18, f"https://github.com/{claims['workflow_ref']}"), False),
            (der(19, claims["workflow_sha"]), False), (der(20, claims["event_name"]), False),
            (der(21, f"{repo_url}/actions/runs/{claims['run_id']}/attempts/1"), False),
            (der(22, claims["repository_visibility"]), False)]
        builder = (x509.CertificateBuilder().subject_name(x509.Name([]))
                   .issuer_name(self.intermediate_cert.subject).public_key(csr.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now).not_valid_after(now + timedelta(minutes=10)))
        for ext, critical in extensions:
            builder = builder.add_extension(ext, critical)
        # The precertificate: what the CT log signs (the TBS without the SCT list).
        precert_tbs = builder.sign(self.intermediate_key, hashes.SHA384()).tbs_certificate_bytes
        sct = self._sct(precert_tbs)
        sct_list = struct.pack("!H", len(sct) + 2) + struct.pack("!H", len(sct)) + sct
        cert = builder.add_extension(x509.UnrecognizedExtension(
            x509.ObjectIdentifier("1.3.6.1.4.1.11129.2.4.2"), asn1.encode_der(sct_list)),
            False).sign(self.intermediate_key, hashes.SHA384())
        assert cert.tbs_precertificate_bytes == precert_tbs
        with self.lock:
            self.certificates.append(cert)
        return [cert, self.intermediate_cert, self.root_cert]

    def _sct(self, precert_tbs: bytes) -> bytes:
        """An RFC 6962 v1 SCT for a precertificate entry, signed by the CT log's key."""
        timestamp = int(time.time() * 1000)
        issuer_key_hash = _key_id(self.intermediate_key.public_key())
        signed = (struct.pack("!BBQH", 0, 0, timestamp, 1) + issuer_key_hash
                  + struct.pack("!I", len(precert_tbs))[1:] + precert_tbs + struct.pack("!H", 0))
        signature = self.ct_key.sign(signed, ec.ECDSA(hashes.SHA256()))
        return (struct.pack("!B", 0) + _key_id(self.ct_key.public_key())
                + struct.pack("!QH", timestamp, 0)
                + struct.pack("!BBH", 4, 3, len(signature)) + signature)

    # -- Rekor v1

    def log_entry(self, proposed: dict) -> dict:
        if (proposed.get("kind"), proposed.get("apiVersion")) != ("hashedrekord", "0.0.1"):
            raise ValueError("only hashedrekord 0.0.1 entries are accepted")
        spec = proposed["spec"]
        pem = base64.b64decode(spec["signature"]["publicKey"]["content"])
        cert = x509.load_pem_x509_certificate(pem)
        digest = bytes.fromhex(spec["data"]["hash"]["value"])
        cert.public_key().verify(base64.b64decode(spec["signature"]["content"]), digest,
                                 ec.ECDSA(Prehashed(hashes.SHA256())))
        body = rfc8785.dumps(proposed)
        log_id = _key_id(self.rekor_key.public_key()).hex()
        with self.lock:
            index = len(self.leaves)
            self.leaves.append(_leaf_hash(body))
            leaves = list(self.leaves)
            integrated = int(time.time())
            self.entries.append(proposed)
        root = tree_root(leaves)
        note = f"127.0.0.1 - {self.tree_id}\n{len(leaves)}\n{_b64(root)}\n"
        note_sig = self.rekor_key.sign(note.encode(), ec.ECDSA(hashes.SHA256()))
        checkpoint = (note + "\n" + f"\u2014 127.0.0.1 "
                      f"{_b64(bytes.fromhex(log_id)[:4] + note_sig)}\n")
        body_b64 = _b64(body)
        set_payload = rfc8785.dumps({"body": body_b64, "integratedTime": integrated,
                                     "logID": log_id, "logIndex": index})
        entry = {"body": body_b64, "integratedTime": integrated, "logID": log_id,
                 "logIndex": index, "verification": {
                     "inclusionProof": {"checkpoint": checkpoint, "logIndex": index,
                                        "rootHash": root.hex(), "treeSize": len(leaves),
                                        "hashes": [h.hex() for h in audit_path(index, leaves)]},
                     "signedEntryTimestamp": _b64(self.rekor_key.sign(
                         set_payload, ec.ECDSA(hashes.SHA256())))}}
        return {_leaf_hash(body).hex(): entry}

    # -- HTTP

    def _handler(self):
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _answer(self, status: int, payload) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> bytes:
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def do_GET(self):  # noqa: N802 (the http.server API)
                url = urlsplit(self.path)
                if url.path != "/oidc/token":
                    return self._answer(404, {"message": "not found"})
                auth = self.headers.get("Authorization", "").lower()
                if auth != f"bearer {standin.request_token}":
                    return self._answer(401, {"message": "bad request token"})
                audience = parse_qs(url.query).get("audience", ["sigstore"])[0]
                return self._answer(200, {"count": 1, "value": standin.mint_token(audience)})

            def do_POST(self):  # noqa: N802
                path = urlsplit(self.path).path
                if path in standin.refuse:
                    return self._answer(503, {"code": 503, "message": "service unavailable"})
                try:
                    body = json.loads(self._body())
                    if path == "/api/v2/signingCert":
                        auth = self.headers.get("Authorization", "")
                        csr = base64.b64decode(body["certificateSigningRequest"])
                        chain = standin.issue(csr, auth.removeprefix("Bearer "))
                        return self._answer(200, {"signedCertificateEmbeddedSct": {
                            "chain": {"certificates": [_pem(c) for c in chain]}}})
                    if path == "/api/v1/log/entries":
                        return self._answer(201, standin.log_entry(body))
                except Exception as exc:  # a refusal, as the real services answer one
                    message = f"{type(exc).__name__}: {exc}"
                    return self._answer(400, {"code": 400, "message": message})
                return self._answer(404, {"message": "not found"})

        return Handler
