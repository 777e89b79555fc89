"""Verification as the `kernels` loader does it (`kbuild verify`), for the author's own signers.

`kernels.verify.verify_variant` (kernels 0.17.2) checks `metadata.json.sigstore` over the exact
bytes of `metadata.json` with sigstore's `Verifier` and a policy, then re-hashes the variant's
files against the digest inside. It always takes `Verifier.production()` (a TUF refresh over the
network) and, by default, trusts only kernels-community's workflows. This runs the same steps
with the loader's own classes (`GitHubWorkflowPolicy`, `Metadata`, `Digest`) but with the trusted
root chosen here (`--offline`: the one in sigstore's TUF cache, which starts as the root its
wheel embeds; `--trust-config`; `--staging`) and a policy for the author's repository and
workflows, from options or `[tool.kbuild.signing]` in the project's pixi.toml (never build.toml:
upstream's parser refuses keys it does not know).
"""

from __future__ import annotations

import logging
import re
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..core.errors import BuildError
from ..core.layout import BUILD_DIR, MANIFEST, METADATA, PIXI_TOML, SIGNATURE
from ..core.loader import loader_data, workflow_policy
from ..core.signature import BundleUnreadable, read_bundle
from ..core.toolconfig import REPOSITORY_HINT, read_tool_settings
from .results import (DigestMissing, DigestVerificationFailure, MetadataInvalid, MetadataMissing, Result,
                      SignatureBundleInvalid, SignatureBundleMissing, SignatureVerificationFailure,
                      SignerNotTrusted, Success)
from .sign import SignerIdentity, one_line, trust_config

Log = Callable[[str], None]
CONFIG_KEY = "tool.kbuild.signing"
REPOSITORY = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*/(?!\.\.?$)[\w.-]+")  # GitHub's OWNER/NAME
WORKFLOW = re.compile(r"https://github\.com/[A-Za-z0-9][A-Za-z0-9-]*/(?!\.\.?/)[\w.-]+"
                      r"/\.github/workflows/[^@\s/]+@refs/\S+")


@dataclass(frozen=True)
class TrustedSigners:
    """The GitHub repository and the workflow URIs (`…/.github/workflows/FILE@REF`) trusted."""

    repository: str
    workflows: tuple[str, ...]

    def policy(self):
        return workflow_policy(self.repository, self.workflows)


def workflow_uri(repository: str, spec: str, *, file: Path | None = None, key: str) -> str:
    """A workflow as a full URI; `.github/workflows/FILE@REF` is taken as `repository`'s."""
    uri = (spec if spec.startswith("https://")
           else f"https://github.com/{repository}/{spec.lstrip('/')}")
    if not WORKFLOW.fullmatch(uri):
        raise BuildError(f"{spec!r} is not a workflow of the form "
                         ".github/workflows/FILE@refs/… (or its https://github.com/… URI)",
                         file=file, key=key,
                         hint="e.g. .github/workflows/build-variants.yml@refs/heads/main")
    return uri


def trusted_signers(project: Path, repository: str | None, workflows: list[str]) -> TrustedSigners:
    """From the options, else from `[tool.kbuild.signing]` in PROJECT/pixi.toml."""
    file = None
    if repository is None or not workflows:
        file = project / PIXI_TOML
        settings = read_tool_settings(file).signing  # its shape checked there
        repository = repository or settings.repository
        workflows = workflows or settings.workflows
    if repository is None or not REPOSITORY.fullmatch(repository):
        raise BuildError("no GitHub repository (OWNER/NAME) whose signatures to trust"
                         if repository is None else f"{repository!r} is not a GitHub OWNER/NAME",
                         file=file,
                         key="--repository" if file is None else f"{CONFIG_KEY}.repository",
                         hint=REPOSITORY_HINT)
    if not workflows:
        raise BuildError("no signing workflow to trust", file=file,
                         key="--workflow" if file is None else f"{CONFIG_KEY}.workflows",
                         hint="pass --workflow .github/workflows/FILE@REF (repeatable) or set "
                              f"workflows in [{CONFIG_KEY}] of pixi.toml")
    uris = tuple(workflow_uri(repository, w, file=file, key="--workflow" if file is None
                              else f"{CONFIG_KEY}.workflows") for w in workflows)
    return TrustedSigners(repository, uris)


@contextmanager
def _quiet_sigstore():
    """sigstore's warnings (the offline mode asked for, the diagnosis below) are not ours."""
    logger = logging.getLogger("sigstore")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def verifier(*, offline: bool = False, trust: Path | None = None, staging: bool = False):
    """sigstore's Verifier for the chosen trusted root; an unreachable TUF repository is one
    error naming --offline."""
    from sigstore import __version__
    from sigstore.errors import TUFError
    from sigstore.verify import Verifier
    if trust is not None:
        return Verifier(trusted_root=trust_config(trust, staging).trusted_root)
    try:
        with _quiet_sigstore():
            return (Verifier.staging(offline=offline) if staging
                    else Verifier.production(offline=offline))
    except TUFError as exc:
        raise BuildError(f"cannot reach Sigstore's TUF repository to refresh the trusted root "
                         f"({one_line(exc.__cause__ or exc)}); pass --offline to verify against "
                         f"the root in sigstore {__version__}'s cache (first the one its wheel "
                         "embeds)") from None


def _signature(name: str, data: bytes, bundle_path: Path, verifier_,
               policy) -> SignerIdentity | Result:
    """The signer's identity when the bundle at `bundle_path` verifies `data`, else the result
    that says why not (about `name`)."""
    from sigstore.errors import VerificationError
    from sigstore.models import Bundle
    try:
        text = read_bundle(bundle_path)
    except BundleUnreadable as exc:
        return SignatureBundleInvalid(name, str(exc))
    except OSError as exc:
        return SignatureBundleInvalid(name, f"{bundle_path.name} cannot be read: {exc.strerror or exc}")
    try:
        bundle = Bundle.from_json(text)
    except Exception as exc:  # untrusted bytes, as InvalidBundle and pydantic's errors
        return SignatureBundleInvalid(name, f"invalid signature bundle: {one_line(exc)}")
    from sigstore.verify.policy import UnsafeNoOp
    signer = SignerIdentity.of(bundle.signing_certificate)
    try:
        verifier_.verify_artifact(data, bundle, policy)
    except VerificationError as exc:
        try:  # which part failed: the signature itself, or only who made it?
            with _quiet_sigstore():
                verifier_.verify_artifact(data, bundle, UnsafeNoOp())
        except VerificationError:
            return SignatureVerificationFailure(name, one_line(exc))
        return SignerNotTrusted(name, signer)
    return signer


def verify_variant(variant: Path, verifier_, policy) -> Result:
    """kernels.verify.verify_variant's steps, in its order, with this verifier."""
    loader = loader_data()
    Digest, DigestValidationError, Metadata = loader.Digest, loader.DigestValidationError, loader.Metadata
    name = variant.name
    if not (variant / SIGNATURE).is_file():
        return SignatureBundleMissing(name, SIGNATURE)
    if not (variant / METADATA).is_file():
        return MetadataMissing(name)
    data = (variant / METADATA).read_bytes()
    signer = _signature(name, data, variant / SIGNATURE, verifier_, policy)
    if not isinstance(signer, SignerIdentity):
        return signer
    try:  # only now, as the loader: the metadata's bytes are the signed ones
        metadata = Metadata.from_bytes(data)
    except (OSError, ValueError) as exc:
        return MetadataInvalid(name, one_line(exc))
    if metadata.digest is None:
        return DigestMissing(name)
    try:
        metadata.digest.validate(Digest.hash_variant(metadata.digest.algorithm, variant))
    except DigestValidationError as exc:
        return DigestVerificationFailure(name, tuple(str(v) for v in exc.violations))
    return Success(name, signer)


def verify_file(path: Path, verifier_, policy) -> Result:
    """Any file with its bundle beside it as `<file>.sigstore`."""
    bundle = path.with_name(path.name + ".sigstore")
    if not bundle.is_file():
        return SignatureBundleMissing(path.name, bundle.name, variant=False)
    signer = _signature(path.name, path.read_bytes(), bundle, verifier_, policy)
    if not isinstance(signer, SignerIdentity):
        return signer
    return Success(path.name, signer, variant=False)


@dataclass(frozen=True)
class Target:
    """What `kbuild verify` was given, resolved in one place: a project, a build folder, one
    variant folder (or its metadata.json or bundle: its signature covers the variant's files),
    a file signed beside it (`<file>.sigstore`), or branch v<version> of a Hub kernel repo."""
    path: Path | None = None
    repo_id: str | None = None
    version: int | None = None

    @property
    def project(self) -> Path:
        """The folder whose pixi.toml names the trusted signers ([tool.kbuild.signing]): the
        target when it is a project (a build.toml or a pixi.toml), else the current folder."""
        path = self.path
        return path if path is not None and path.is_dir() and (
            (path / MANIFEST).is_file() or (path / PIXI_TOML).is_file()) else Path(".")

    def contents(self, endpoint: str | None = None) -> tuple[list[Path], list[Path]]:
        """(the variant folders, the signed files) to verify; a Hub version is downloaded."""
        from ..core.built import variant_dirs
        if self.repo_id is not None:
            if self.path is not None:
                raise BuildError("give either a folder or --repo-id, not both")
            if self.version is None:
                raise BuildError("--repo-id needs --version", hint="e.g. --version 1 for branch v1")
            from .wheel import download_build
            return variant_dirs(download_build(self.repo_id, self.version, endpoint=endpoint)), []
        target = (self.path or Path(".")).resolve()
        if target.is_file() and target.name in (METADATA, SIGNATURE):
            variants, files = [target.parent], []  # its signature covers the variant's files
        elif target.is_file():
            variants, files = [], [target]
        elif (target / METADATA).is_file():
            variants, files = [target], []
        else:
            root = target / BUILD_DIR if (target / MANIFEST).is_file() else target
            if not root.is_dir():
                raise BuildError("nothing to verify here", file=root, hint="give a build folder, "
                                 "a variant folder, a signed file or --repo-id with --version")
            variants, files = variant_dirs(root), []
        if not variants and not files:
            raise BuildError("no variants to verify", file=target)
        return variants, files


def verify(target: Target | Path | None, signers: TrustedSigners, *, repo_id: str | None = None,
           version: int | None = None, offline: bool = False, trust: Path | None = None,
           staging: bool = False, endpoint: str | None = None) -> list[Result]:
    """The result of each variant or signed file of `target` (a `Target`, or its path with
    `repo_id` and `version`). A variant's `metadata.json` (or its bundle) stands for its
    variant: the files are checked against the signed digest too."""
    if not isinstance(target, Target):
        target = Target(target, repo_id, version)
    variants, files = target.contents(endpoint)
    verifier_, policy = verifier(offline=offline, trust=trust, staging=staging), signers.policy()
    return ([verify_variant(v, verifier_, policy) for v in variants]
            + [verify_file(f, verifier_, policy) for f in files])
