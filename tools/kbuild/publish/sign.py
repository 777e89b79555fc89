"""Signing (`kbuild sign`, `kbuild upload --sign`): each variant's `metadata.json` signed keyless
with Sigstore (sigstore-python, the library the `kernels` loader verifies with), written as
`build/<variant>/metadata.json.sigstore`, the bundle `kernels.verify.verify_variant` reads.

One run: one identity token (the CI job's ambient OIDC credential), one ephemeral key and one
Fulcio certificate for every variant, one Rekor entry per variant. Each bundle is verified
against the same trusted root and the signer's own identity before any is written; a failure
writes none. The signature binds the bytes of `metadata.json` (and through its digest every
other file), not the folder's name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..core.built import BuiltVariant
from ..core.errors import BuildError
from ..core.files import write_atomic
from ..core.loader import workflow_policy
from ..core.layout import METADATA, SIGNATURE

if TYPE_CHECKING:
    from sigstore.models import ClientTrustConfig
    from sigstore.oidc import IdentityToken

Log = Callable[[str], None]
GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
_OID = "1.3.6.1.4.1.57264.1."  # Fulcio's certificate extensions
ISSUER_V1, ISSUER_V2, BUILD_SIGNER_URI, SOURCE_REPOSITORY_URI = "1", "8", "9", "12"


def one_line(exc: BaseException) -> str:
    """An exception as one line; a pydantic error as its first problem."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            first = errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ())) or "(top level)"
            count = len(errors())
            more = f" (and {count - 1} more)" if count > 1 else ""
            return f"{where}: {first.get('msg', '')}{more}"
        except Exception:  # not pydantic's: the plain text below
            pass
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass(frozen=True)
class SignerIdentity:
    """Who a certificate says signed: for GitHub Actions, the repository and the workflow
    (`https://github.com/OWNER/REPO/.github/workflows/FILE@REF`) users must pin."""

    issuer: str
    subject: str
    repository: str | None = None
    workflow: str | None = None

    @classmethod
    def of(cls, cert) -> "SignerIdentity":
        from cryptography import x509
        from cryptography.hazmat import asn1

        def ext(oid: str, der: bool) -> str | None:
            try:
                value = cert.extensions.get_extension_for_oid(
                    x509.ObjectIdentifier(_OID + oid)).value.value
            except x509.ExtensionNotFound:
                return None
            return asn1.decode_der(str, value) if der else value.decode()
        try:
            san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            subject = str(next(iter(san)).value)
        except (x509.ExtensionNotFound, StopIteration):
            subject = ""
        repo_uri = ext(SOURCE_REPOSITORY_URI, True) or ""
        return cls(issuer=ext(ISSUER_V2, True) or ext(ISSUER_V1, False) or "", subject=subject,
                   repository=repo_uri.removeprefix("https://github.com/") or None,
                   workflow=ext(BUILD_SIGNER_URI, True))

    @property
    def github(self) -> bool:
        return self.issuer == GITHUB_ISSUER and bool(self.repository and self.workflow)

    def policy(self):
        """The verification policy that accepts exactly this signer."""
        if self.github:
            return workflow_policy(self.repository, [self.workflow])
        from sigstore.verify.policy import Identity
        return Identity(identity=self.subject, issuer=self.issuer)

    def describe(self) -> str:
        if self.github:
            return f"repository {self.repository}, workflow {self.workflow}"
        return f"identity {self.subject} (OIDC issuer {self.issuer})"


@dataclass(frozen=True)
class SigningOptions:
    trust_config: Path | None = None  # a ClientTrustConfig JSON (a private Sigstore, tests)
    staging: bool = False             # Sigstore's staging instance


def trust_config(path: Path | None, staging: bool = False) -> "ClientTrustConfig":
    from sigstore.errors import TUFError
    from sigstore.models import ClientTrustConfig
    if path is not None:
        if staging:
            raise BuildError("give either --trust-config or --staging, not both")
        try:
            text = Path(path).read_text(encoding="utf-8")
            config = ClientTrustConfig.from_json(text)
            _ = config.trusted_root, config.signing_config  # both are parsed on first use
        except Exception as exc:  # a file of the wrong shape: pydantic, JSON, sigstore errors
            raise BuildError(
                f"not a Sigstore client trust config: {one_line(exc)}", file=path,
                hint="a ClientTrustConfig JSON (media type "
                     "application/vnd.dev.sigstore.clienttrustconfig.v0.1+json)") from None
        return config
    try:
        return ClientTrustConfig.staging() if staging else ClientTrustConfig.production()
    except TUFError as exc:
        raise BuildError(f"cannot refresh Sigstore's trust root from its TUF repository "
                         f"({one_line(exc.__cause__ or exc)}); nothing was signed") from None


def identity_token() -> "IdentityToken":
    """This CI job's ambient OIDC identity (GitHub Actions, GitLab, Buildkite, CircleCI, GCP), as
    sigstore-python detects it."""
    import id as id_module
    from sigstore.oidc import IdentityError, IdentityToken, detect_credential
    try:
        raw = detect_credential()
    except IdentityError as exc:
        if isinstance(exc.__cause__, id_module.GitHubOidcPermissionCredentialError):
            raise BuildError("this GitHub Actions job may not request an OIDC token (its workflow "
                             "lacks `permissions: id-token: write`), so it cannot sign: give that "
                             "permission to the one job that signs and uploads") from None
        raise BuildError("the CI job's OIDC credential could not be read: "
                         f"{one_line(exc)}") from None
    if raw is None:
        raise BuildError("no ambient OIDC credential to sign with (signing is keyless: it runs in "
                         "a CI job, e.g. a GitHub Actions job with `permissions: id-token: write`)")
    try:
        return IdentityToken(raw)
    except IdentityError as exc:
        raise BuildError("the CI job's OIDC token is not usable for Sigstore: "
                         f"{one_line(exc)}") from None


def sign_variants(variants: list[BuiltVariant], options: SigningOptions = SigningOptions(), *,
                  log: Log = print) -> SignerIdentity:
    """Signs every variant's metadata.json with one certificate, verifies each bundle, then
    writes them all; raises BuildError (nothing written) on any failure."""
    from sigstore.models import Bundle
    from sigstore.sign import SigningContext
    from sigstore.verify import Verifier

    # A bad --trust-config file first, then the credential (outside CI the one thing to say),
    # then Sigstore's public trust root, fetched over the network.
    config = trust_config(options.trust_config, options.staging) if options.trust_config else None
    token = identity_token()
    config = config or trust_config(None, options.staging)
    signed: list[tuple[BuiltVariant, bytes, str]] = []
    try:
        context = SigningContext.from_trust_config(config)
        with context.signer(token, cache=True) as signer:  # one key, one certificate
            for v in variants:
                data = (v.path / METADATA).read_bytes()
                signed.append((v, data, signer.sign_artifact(data).to_json()))
    except (BuildError, OSError):
        raise
    except Exception as exc:  # Fulcio, Rekor, the network, an expired token: one line each
        raise BuildError(f"signing failed: {one_line(exc)}; no signature was written") from None
    identity = SignerIdentity.of(Bundle.from_json(signed[0][2]).signing_certificate)
    verifier = Verifier(trusted_root=config.trusted_root)
    for v, data, bundle in signed:
        try:
            verifier.verify_artifact(data, Bundle.from_json(bundle), identity.policy())
        except Exception as exc:  # a Sigstore instance that signs what it cannot verify
            raise BuildError(f"the new signature of {v.name} does not verify: {one_line(exc)}; "
                             "no signature was written") from None
    for v, data, bundle in signed:
        if (v.path / METADATA).read_bytes() != data:
            raise BuildError("metadata.json changed while it was being signed",
                             file=v.path / METADATA, hint="run it again once the build is done")
    for v, _, bundle in signed:
        write_atomic(v.path / SIGNATURE, bundle)
        entry = json.loads(bundle)["verificationMaterial"]["tlogEntries"][0]
        log(f"signed {v.name}: {SIGNATURE} (transparency log entry {entry['logIndex']})")
    log(f"signed {len(signed)} variant(s) as {identity.describe()}")
    if identity.github:
        log("users verify with kernels.verify.GitHubWorkflowPolicy("
            f"repo_id={identity.repository!r}, signer_uris=[{identity.workflow!r}])")
    return identity


def require_signed(variants: list[BuiltVariant], skipped: dict[str, list[str]]) -> None:
    """`upload --require-signature`: every variant signed, its signature over the current
    metadata.json (and none skipped for a stale or unreadable one); else nothing is written."""
    from ..core.signature import signature_state
    from ..stages.check import SIGNATURE_CODES
    bad = [f"{v.name} ({state.status})" for v in variants
           if not (state := signature_state(v.path)).current]
    for name, problems in skipped.items():
        codes = {getattr(p, "code", "") for p in problems} & set(SIGNATURE_CODES)
        bad += [f"{name} ({code.removeprefix('signature.')})" for code in sorted(codes)[:1]]
    if bad:
        raise BuildError(f"--require-signature: not signed over the current metadata.json: "
                         f"{', '.join(sorted(bad))}; nothing was written",
                         hint="sign them in CI (`kbuild sign`, or `kbuild upload --sign`)")


def sign_build(build_dir: Path, options: SigningOptions = SigningOptions(), *,
               log: Log = print) -> SignerIdentity:
    """`kbuild sign`: every variant of `build_dir`, each passing `kbuild check`'s file checks
    (metadata, digest, layout, ABI; no local build) or nothing is signed."""
    from ..core.built import variant_dirs
    from ..stages.check import BYTECODE, SIGNATURE_CODES, check_variant
    if not build_dir.is_dir() or not variant_dirs(build_dir):
        raise BuildError("no variants to sign", file=build_dir, hint="run `kbuild build` first")
    variants = []
    for folder in variant_dirs(build_dir):
        problems = [p for p in check_variant(folder, load=False).problems
                    if p.code != BYTECODE and p.code not in SIGNATURE_CODES]
        if problems:
            raise BuildError(f"{folder.name} does not pass `kbuild check` ({problems[0]}); "
                             "nothing was signed", file=folder,
                             hint="rebuild it, or remove it from the build folder")
        variants.append(BuiltVariant.load(folder))
    return sign_variants(variants, options, log=log)
