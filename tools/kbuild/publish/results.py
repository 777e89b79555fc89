"""What `kbuild verify` found, per variant or signed file: one of a closed set of result types,
as the `kernels` loader's `kernels.verify.VerificationResult` (the same names, and the same
order of checks), plus `SignerNotTrusted`, which the loader counts as a failed signature: a
signature that verifies, by a signer the policy does not name. `Result` is their union.

Each has the `target` it is about, `ok`, the line `kbuild verify` prints (`text`) and its JSON
(`to_json`: the type's name, the target, its fields; `kbuild verify --json`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar, TypeAlias, final

from .sign import SignerIdentity


@dataclass(frozen=True)
class _Result:
    target: str              # a variant folder's name, or a signed file's
    ok: ClassVar[bool] = False

    @property
    def text(self) -> str:
        raise NotImplementedError

    def to_json(self) -> dict[str, Any]:
        own = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "target"}
        return {"result": type(self).__name__, "target": self.target, "ok": self.ok,
                **{k: asdict(v) if isinstance(v, SignerIdentity) else v for k, v in own.items()},
                "text": self.text}


@final
@dataclass(frozen=True)
class Success(_Result):
    """The signature verifies, by a trusted signer; for a variant, every file matches the
    digest it signs."""
    signer: SignerIdentity
    variant: bool = True     # a variant (its files checked too), else one signed file
    ok: ClassVar[bool] = True

    @property
    def text(self) -> str:
        return f"signed by {self.signer.describe()}" + ("; every file matches the digest"
                                                         if self.variant else "")


@final
@dataclass(frozen=True)
class SignatureBundleMissing(_Result):
    """Not signed: no bundle beside it."""
    bundle: str              # the bundle's file name
    variant: bool = True

    @property
    def text(self) -> str:
        return f"not signed (no {self.bundle}" + (")" if self.variant else " beside it)")


@final
@dataclass(frozen=True)
class MetadataMissing(_Result):
    """A bundle, and no metadata.json for it to sign."""

    @property
    def text(self) -> str:
        return "metadata.json is missing"


@final
@dataclass(frozen=True)
class SignatureBundleInvalid(_Result):
    """A bundle that is not read (too large, not a regular file, unreadable) or not parsed."""
    reason: str

    @property
    def text(self) -> str:
        return self.reason


@final
@dataclass(frozen=True)
class SignatureVerificationFailure(_Result):
    """The signature does not verify (not over these bytes, not from the trusted root, …)."""
    reason: str

    @property
    def text(self) -> str:
        return f"signature verification failed: {self.reason}"


@final
@dataclass(frozen=True)
class SignerNotTrusted(_Result):
    """The signature verifies, and its signer is not one the policy trusts."""
    signer: SignerIdentity

    @property
    def text(self) -> str:
        return (f"signature verification failed: signed by {self.signer.describe()}, which is "
                "not a trusted signer here")


@final
@dataclass(frozen=True)
class MetadataInvalid(_Result):
    """The signed metadata.json does not parse as the loader's `Metadata`."""
    reason: str

    @property
    def text(self) -> str:
        return f"invalid metadata: {self.reason}"


@final
@dataclass(frozen=True)
class DigestMissing(_Result):
    """The signed metadata.json holds no digest of the variant's files."""

    @property
    def text(self) -> str:
        return "metadata.json has no digest"


@final
@dataclass(frozen=True)
class DigestVerificationFailure(_Result):
    """Files differ from the digest the signature covers (one line per violation)."""
    violations: tuple[str, ...]

    @property
    def text(self) -> str:
        return "files differ from the signed digest: " + "; ".join(self.violations)


Result: TypeAlias = (Success | SignatureBundleMissing | MetadataMissing | SignatureBundleInvalid
                     | SignatureVerificationFailure | SignerNotTrusted | MetadataInvalid
                     | DigestMissing | DigestVerificationFailure)
