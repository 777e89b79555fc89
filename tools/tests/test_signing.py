"""Signing, offline: `kbuild upload --sign` signs real built variants with sigstore-python's own
signing code against a stand-in GitHub OIDC endpoint, Fulcio and Rekor on 127.0.0.1
(sigstore_standin.py), uploads them to the test Hub, and the `kernels` loader's own
`verify_variant` and `kernels verify-signature` (pointed at the stand-in's trusted root) accept
each variant and refuse tampering and other signers. Also: `kbuild verify` of a real bundle made
by Sigstore's production instance (../shared/sigstore), `kbuild check` on unreadable and stale
bundles, `upload --require-signature`, and what happens without a CI credential."""

from __future__ import annotations

from functools import partial
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from kbuild.core.errors import BuildError
from kbuild.core.layout import SIGNATURE
from kbuild.core.signature import signature_state
from kbuild.publish import upload as publish
from kbuild.publish.sign import SigningOptions
from kbuild.stages import check, pipeline
from kbuild_hub.server import HubServer
from kbuild_testing import as_variant, fresh_copy, kbuild as run_kbuild
from sigstore_standin import StandInSigstore

pytest.importorskip("httpx2", reason="huggingface_hub's HTTP client (hub ≥ 1.x)")

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("KBUILD_TEST_SHARED") or REPO_ROOT.parent / "shared") / "sigstore"
TOKEN = "hf_signing_test_token_77c1"
HUB_REPO = "kernels-test/img2gray"
GITHUB_REPO = "kbuild-test/img2gray"  # the repository the stand-in's tokens name
WORKFLOW = ".github/workflows/build-variants.yml"
REF = "refs/heads/main"
OTHER = "torch212-cxx11-cpu-x86_64-linux"  # a second variant (a copy, as that build makes it)
# What could give a process an ambient OIDC credential; none of it reaches the tests' commands.
CI_VARS = ("GITHUB_ACTIONS", "ACTIONS_ID_TOKEN_REQUEST_TOKEN", "ACTIONS_ID_TOKEN_REQUEST_URL",
           "GITLAB_CI", "BUILDKITE", "CIRCLECI", "GOOGLE_SERVICE_ACCOUNT_NAME")


def clean_env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in CI_VARS and not k.startswith(("HF_", "HUGGING_FACE_", "KERNELS_"))}
    env.pop("LOCAL_KERNELS", None)
    env.update(HF_HOME=str(tmp / "hf_home"), XDG_CACHE_HOME=str(tmp / "xdg-cache"),
               XDG_DATA_HOME=str(tmp / "xdg-data"), **extra)
    return env


def run(args: list, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], env=env, capture_output=True, text=True,
                          timeout=300)


kbuild = partial(run_kbuild, inherit=False, timeout=300)  # each test passes its whole environment


def variants_of(project: Path) -> dict[str, Path]:
    return {p.name: p for p in sorted((project / "build").iterdir()) if p.is_dir()}


def error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith("error:")]


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def sigstore(tmp_path_factory):
    with StandInSigstore(repository=GITHUB_REPO, workflow=WORKFLOW, ref=REF) as standin:
        standin.config = standin.write_trust_config(tmp_path_factory.mktemp("trust") / "trust.json")
        yield standin


@pytest.fixture(scope="module")
def hub():
    with HubServer(token=TOKEN) as server:
        yield server


def policy(sigstore, repository: str = GITHUB_REPO, workflow: str | None = None):
    from kernels.verify import GitHubWorkflowPolicy
    return GitHubWorkflowPolicy(repo_id=repository, signer_uris=[workflow or sigstore.signer_uri])


@pytest.fixture(scope="module")
def signed(builds, sigstore, hub, tmp_path_factory):
    """img2gray's CPU variant and a copy of it as torch212's, signed by `kbuild upload --sign`
    (the CLI, in a GitHub Actions job with `id-token: write`) and uploaded to the test Hub."""
    tmp = tmp_path_factory.mktemp("signed")
    project = fresh_copy(builds(), tmp / "img2gray")
    (variant,) = variants_of(project).values()
    as_variant(variant, OTHER)
    env = clean_env(tmp, HF_ENDPOINT=hub.url, HF_TOKEN=TOKEN, **sigstore.github_env())
    before = (sigstore.tokens_minted, len(sigstore.certificates), len(sigstore.entries))
    result = kbuild("upload", project, "--sign", "--trust-config", sigstore.config, env=env)
    after = (sigstore.tokens_minted, len(sigstore.certificates), len(sigstore.entries))
    return SimpleNamespace(project=project, result=result, env=env, tmp=tmp,
                           used=tuple(a - b for a, b in zip(after, before)))


@pytest.fixture
def test_root(sigstore, monkeypatch):
    """The loader's `Verifier.production()` pointed at the stand-in's trusted root."""
    from sigstore.models import ClientTrustConfig
    from sigstore.verify import Verifier
    root = ClientTrustConfig.from_json(sigstore.config.read_text()).trusted_root
    monkeypatch.setattr(Verifier, "production", classmethod(lambda cls, offline=False: cls(
        trusted_root=root)))


# In a subprocess: the loader's own code with Verifier.production() pointed at the stand-in's
# root (argv[1]), and kernels' default policies replaced by the test repository's (argv[2:4]).
LOADER_AT_TEST_ROOT = """\
import sys
from pathlib import Path
from sigstore.models import ClientTrustConfig
from sigstore.verify import Verifier
import kernels.verify as kv

_test_root = ClientTrustConfig.from_json(Path(sys.argv[1]).read_text()).trusted_root
Verifier.production = classmethod(lambda cls, offline=False: cls(trusted_root=_test_root))
kv.DEFAULT_POLICIES[:] = [kv.GitHubWorkflowPolicy(repo_id=sys.argv[2], signer_uris=[sys.argv[3]])]
"""


# ----------------------------------------------------------------------------- sign, upload, verify


def test_upload_sign_then_the_loader_verifies_each_variant(signed, sigstore, hub):
    result = signed.result
    assert result.returncode == 0, result.stderr
    names = sorted(variants_of(signed.project))
    assert names == [OTHER, "torch213-cxx11-cpu-x86_64-linux"]
    # one identity token, one certificate, one Rekor entry per variant
    assert signed.used == (1, 1, 2)
    assert (f"signed 2 variant(s) as repository {GITHUB_REPO}, workflow "
            f"https://github.com/{GITHUB_REPO}/{WORKFLOW}@{REF}") in result.stdout
    assert (f"GitHubWorkflowPolicy(repo_id='{GITHUB_REPO}', "
            f"signer_uris=['{sigstore.signer_uri}'])") in result.stdout
    files = hub.files(HUB_REPO, revision="v1")
    for name, folder in variants_of(signed.project).items():
        assert files[f"build/{name}/{SIGNATURE}"] == (folder / SIGNATURE).read_bytes()
        assert files[f"build/{name}/metadata.json"] == (folder / "metadata.json").read_bytes()

    # kernels' own verify_variant, on what the Hub serves
    code = LOADER_AT_TEST_ROOT + """\
from kernels._versions import select_revision_or_version
from kernels.install import install_kernel_all_variants
revision = select_revision_or_version(sys.argv[4], revision=None, version=1,
                                      local_files_only=False)
path = install_kernel_all_variants(sys.argv[4], revision=revision)
for variant in sorted(p for p in (Path(path)).iterdir() if p.is_dir()):
    print(variant.name, type(kv.verify_variant(variant, kv.DEFAULT_POLICIES)).__name__)
"""
    proc = run([sys.executable, "-c", code, sigstore.config, GITHUB_REPO, sigstore.signer_uri,
                HUB_REPO], signed.env)
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.split("\n")[:-1]) == [f"{n} Success" for n in names]

    # and its command line: `kernels verify-signature REPO 1 --all-variants`
    cli = LOADER_AT_TEST_ROOT + """\
from kernels.cli import main
sys.argv = ["kernels", "verify-signature", "--all-variants", sys.argv[4], "1"]
main()
"""
    proc = run([sys.executable, "-c", cli, sigstore.config, GITHUB_REPO, sigstore.signer_uri,
                HUB_REPO], signed.env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in names:
        assert f"✅ {name}: kernel metadata is correctly signed" in proc.stdout


def test_the_loader_refuses_tampering_other_signers_and_the_production_root(
        signed, sigstore, test_root, tmp_path, monkeypatch):
    from kernels.verify import VerificationResult as R, verify_variant
    from sigstore.verify import Verifier

    def copy(name: str, as_name: str | None = None) -> Path:
        source = variants_of(signed.project)[name]
        return Path(shutil.copytree(source, tmp_path / (as_name or name)))

    base = "torch213-cxx11-cpu-x86_64-linux"
    assert isinstance(verify_variant(copy(base), [policy(sigstore)]), R.Success)

    so_changed = copy(base, "so")
    (so,) = so_changed.glob("*.so")
    data = bytearray(so.read_bytes())
    data[-1] ^= 1
    so.write_bytes(bytes(data))
    result = verify_variant(so_changed, [policy(sigstore)])
    assert isinstance(result, R.DigestVerificationFailure) and result.violations

    meta_changed = copy(base, "meta")
    meta = meta_changed / "metadata.json"
    meta.write_text(meta.read_text() + " ")
    result = verify_variant(meta_changed, [policy(sigstore)])
    assert isinstance(result, R.SignatureVerificationFailure)

    swapped = copy(base, "swapped")
    shutil.copy(variants_of(signed.project)[OTHER] / SIGNATURE, swapped / SIGNATURE)
    assert isinstance(verify_variant(swapped, [policy(sigstore)]), R.SignatureVerificationFailure)

    fine = copy(base, "fine")
    other_repo = verify_variant(fine, [policy(sigstore, repository="kbuild-test/other")])
    assert isinstance(other_repo, R.SignatureVerificationFailure)
    release = f"https://github.com/{GITHUB_REPO}/.github/workflows/release.yml@{REF}"
    other_workflow = verify_variant(fine, [policy(sigstore, workflow=release)])
    assert isinstance(other_workflow, R.SignatureVerificationFailure)

    # Sigstore's production root (embedded in the sigstore wheel) does not know the stand-in
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    from sigstore.models import ClientTrustConfig
    production = ClientTrustConfig.production(offline=True).trusted_root
    monkeypatch.setattr(Verifier, "production", classmethod(lambda cls, offline=False: cls(
        trusted_root=production)))
    refused = verify_variant(fine, [policy(sigstore)])
    assert isinstance(refused, R.SignatureVerificationFailure)
    assert "certificate chain" in refused.reason


def test_a_signature_binds_metadata_not_the_folder_name(signed, sigstore, test_root, tmp_path):
    """The documented limit: a signed folder copied under another variant's name still verifies
    in the loader; `kbuild check` tells by the name recorded in the binary."""
    from kernels.verify import VerificationResult as R, verify_variant
    source = variants_of(signed.project)["torch213-cxx11-cpu-x86_64-linux"]
    renamed = Path(shutil.copytree(source, tmp_path / "torch213-cxx11-cpu-aarch64-linux"))
    assert isinstance(verify_variant(renamed, [policy(sigstore)]), R.Success)
    codes = {p.code for p in check.check_variant(renamed, load=False).problems}
    assert "layout.name-binary" in codes


def test_kbuild_verify_trusts_only_the_given_repository_and_workflow(signed, sigstore, hub):
    trust = ["--trust-config", sigstore.config, "--repository", GITHUB_REPO]
    proc = kbuild("verify", signed.project, *trust, "--workflow", f"{WORKFLOW}@{REF}",
                  env=signed.env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in variants_of(signed.project):
        assert (f"verified {name}: signed by repository {GITHUB_REPO}, workflow "
                f"{sigstore.signer_uri}; every file matches the digest") in proc.stdout
    hub_proc = kbuild("verify", "--repo-id", HUB_REPO, "--version", "1", *trust, "--workflow",
                      sigstore.signer_uri, env=signed.env)
    assert hub_proc.returncode == 0 and hub_proc.stdout.count("verified ") == 2, hub_proc.stderr
    other = kbuild("verify", signed.project, *trust, "--workflow",
                   ".github/workflows/release.yml@refs/heads/main", env=signed.env)
    assert other.returncode == 1 and other.stdout.count("FAILED ") == 2 and other.stderr == ""
    assert (f"signed by repository {GITHUB_REPO}, workflow {sigstore.signer_uri}, which is not "
            "a trusted signer here") in other.stdout


def test_the_documented_snippet_verifies_each_uploaded_variant(signed, sigstore):
    """docs/security.md's Python snippet, as written but for the names, run against the upload
    (the loader's Verifier.production() pointed at the stand-in's root)."""
    text = (REPO_ROOT / "docs" / "security.md").read_text()
    snippet = text.split("<!-- verify-snippet")[1].split("```python\n")[1].split("```")[0]
    uri = "https://github.com/OWNER/REPO/.github/workflows/build-variants.yml@refs/tags/v1.0.0"
    assert uri in snippet and '"my-org/my-kernel"' in snippet
    snippet = (snippet.replace(uri, sigstore.signer_uri).replace('"OWNER/REPO"', repr(GITHUB_REPO))
               .replace('"my-org/my-kernel"', repr(HUB_REPO)))
    proc = run([sys.executable, "-c", LOADER_AT_TEST_ROOT + snippet, sigstore.config, GITHUB_REPO,
                sigstore.signer_uri], signed.env)
    assert proc.returncode == 0, proc.stderr
    names = sorted(variants_of(signed.project))
    assert proc.stdout.splitlines() == [f"{n} verified" for n in names]


# ----------------------------------------------------------------------------- refusals


def test_no_ambient_credential_is_one_line_and_signs_nothing(builds, tmp_path):
    project = fresh_copy(builds(), tmp_path / "img2gray")
    outside = kbuild("sign", project, env=clean_env(tmp_path))
    assert outside.returncode == 2
    assert outside.stderr.strip().splitlines() == [
        "error: no ambient OIDC credential to sign with (signing is keyless: it runs in a CI job, "
        "e.g. a GitHub Actions job with `permissions: id-token: write`)"]
    no_permission = kbuild("sign", project, env=clean_env(tmp_path, GITHUB_ACTIONS="true"))
    assert no_permission.returncode == 2 and len(no_permission.stderr.strip().splitlines()) == 1
    assert "lacks `permissions: id-token: write`" in no_permission.stderr
    assert not list(project.glob(f"build/*/{SIGNATURE}"))


def test_a_signing_failure_writes_nothing(builds, sigstore, hub, tmp_path):
    project = fresh_copy(builds(), tmp_path / "img2gray")
    env = clean_env(tmp_path, HF_ENDPOINT=hub.url, HF_TOKEN=TOKEN, **sigstore.github_env())
    since = len(hub.requests)
    sigstore.refuse = {"/api/v1/log/entries"}  # Rekor answers 503
    try:
        proc = kbuild("upload", project, "--repo-id", "kernels-test/never", "--sign",
                      "--trust-config", sigstore.config, env=env)
    finally:
        sigstore.refuse = set()
    assert proc.returncode == 2
    assert error_lines(proc) and error_lines(proc)[0].startswith("error: signing failed: ")
    assert "no signature was written" in proc.stderr and "Traceback" not in proc.stderr
    assert not list(project.glob(f"build/*/{SIGNATURE}"))
    assert not [r for r in hub.requests[since:] if r[0] not in ("GET", "HEAD")]


def test_check_flags_unparsable_and_stale_bundles(signed, builds, tmp_path):
    project = fresh_copy(signed.project, tmp_path / "img2gray")
    folders = variants_of(project)
    garbled, stale = folders["torch213-cxx11-cpu-x86_64-linux"], folders[OTHER]
    (garbled / SIGNATURE).write_text(
        '{"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json"}')
    meta = json.loads((stale / "metadata.json").read_text())
    (stale / "metadata.json").write_text(json.dumps(meta, indent=1))  # the same keys, other bytes
    codes = {name: [p.code for p in check.check_variant(f, load=False).problems]
             for name, f in folders.items()}
    assert codes == {"torch213-cxx11-cpu-x86_64-linux": ["signature.invalid"],
                     OTHER: ["signature.stale"]}
    proc = kbuild("check", project, "--no-load", env=clean_env(tmp_path, COLUMNS="400"))
    assert proc.returncode == 1
    assert ("signature: metadata.json.sigstore not a Sigstore bundle the loader can read"
            in proc.stdout)
    assert ("signature: metadata.json.sigstore it signs other bytes than the current "
            "metadata.json") in proc.stdout


def test_require_signature_refuses_unsigned_or_stale_before_writing(builds, signed, hub, tmp_path):
    def upload(project: Path, **kw):
        options = publish.UploadOptions(endpoint=hub.url, token=TOKEN, backoff=0.01, load=False,
                                        require_signature=True, **kw)
        return publish.upload(project, options, log=lambda _: None, warn=lambda _: None)

    since = len(hub.requests)
    unsigned = fresh_copy(builds(), tmp_path / "unsigned")
    with pytest.raises(BuildError, match=r"--require-signature: not signed over the current "
                       r"metadata.json: torch213-cxx11-cpu-x86_64-linux \(missing\); nothing"):
        upload(unsigned)
    stale = fresh_copy(signed.project, tmp_path / "stale")
    meta = stale / "build" / OTHER / "metadata.json"
    meta.write_text(meta.read_text() + "\n")
    with pytest.raises(BuildError, match=rf"{OTHER} \(stale\)"):
        upload(stale)
    assert not [r for r in hub.requests[since:] if r[0] not in ("GET", "HEAD")]
    # signed as they are: accepted (and already there: no commit)
    result = upload(fresh_copy(signed.project, tmp_path / "fine"))
    assert result.status == "no_changes"


def test_upload_sign_replaces_a_stale_signature_and_a_dry_run_signs_nothing(
        signed, sigstore, hub, tmp_path, monkeypatch):
    project = fresh_copy(signed.project, tmp_path / "img2gray")
    meta = project / "build" / OTHER / "metadata.json"
    meta.write_text(meta.read_text() + "\n")  # edited after signing: stale
    for key, value in sigstore.github_env().items():
        monkeypatch.setenv(key, value)
    logs: list[str] = []

    def upload(**kw) -> publish.UploadResult:
        options = publish.UploadOptions(
            endpoint=hub.url, token=TOKEN, backoff=0.01, load=False, sign=True,
            signing=SigningOptions(trust_config=sigstore.config), **kw)
        return publish.upload(project, options, log=logs.append, warn=logs.append)

    minted = sigstore.tokens_minted
    assert upload(dry_run=True).status == "dry_run"
    assert "dry run: would sign 2 variant(s); no certificate is requested" in logs
    assert sigstore.tokens_minted == minted
    assert signature_state(meta.parent).status == "stale"
    result = upload()
    assert result.status == "uploaded" and sigstore.tokens_minted == minted + 1
    assert sorted(result.changed) == sorted(
        [f"build/{OTHER}/metadata.json"] + [f"build/{v}/{SIGNATURE}" for v in variants_of(project)])
    assert all(signature_state(f).current for f in variants_of(project).values())


def test_a_rebuild_leaves_no_stale_signature(builds, signed, tmp_path):
    # the same sources: the folder is kept, and with it a signature only while it is current
    same = fresh_copy(signed.project, tmp_path / "same")
    folder = variants_of(same)["torch213-cxx11-cpu-x86_64-linux"]
    meta = json.loads((folder / "metadata.json").read_text())
    (folder / "metadata.json").write_text(json.dumps(meta, indent=3))  # the same, other bytes
    (so,) = folder.glob("*.so")
    inode = so.stat().st_ino
    pipeline.build(same, backends=["cpu"])
    assert so.stat().st_ino == inode  # kept, not replaced
    assert not (folder / SIGNATURE).exists()
    assert (variants_of(same)[OTHER] / SIGNATURE).is_file()

    # other sources: a new folder, without the old signature
    project = fresh_copy(signed.project, tmp_path / "img2gray")
    marked = builds("marked", marker="v1b")  # other sources (built by the run already)
    shutil.copy(marked / "torch-ext" / "img2gray" / "__init__.py",
                project / "torch-ext" / "img2gray" / "__init__.py")
    pipeline.build(project, backends=["cpu"])
    folders = variants_of(project)
    assert not (folders["torch213-cxx11-cpu-x86_64-linux"] / SIGNATURE).exists()
    assert (folders[OTHER] / SIGNATURE).is_file()  # not rebuilt: its signature still current
    assert not [p for f in folders.values() for p in check.check_variant(f, load=False).problems]


# ----------------------------------------------------------------------------- a real bundle


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def real_bundle(tmp_path) -> Path:
    if not (SHARED / "bundle_v3_github.whl.sigstore").is_file():
        pytest.skip(f"the real Sigstore bundle is test data beside the checkout ({SHARED}, "
                    "README there), absent here")
    for name in ("bundle_v3_github.whl", "bundle_v3_github.whl.sigstore"):
        shutil.copy(SHARED / name, tmp_path / name)
    return tmp_path / "bundle_v3_github.whl"


REAL_REPO = "trailofbits/rfc8785.py"
REAL_WORKFLOW = ".github/workflows/release.yml@refs/tags/v0.1.2"


def test_a_real_bundle_verifies_offline_with_its_signer_only(real_bundle, tmp_path):
    env = clean_env(tmp_path)
    ok = kbuild("verify", real_bundle, "--offline", "--repository", REAL_REPO,
                "--workflow", REAL_WORKFLOW, env=env)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.strip() == (
        f"verified bundle_v3_github.whl: signed by repository {REAL_REPO}, workflow "
        f"https://github.com/{REAL_REPO}/{REAL_WORKFLOW}")
    for other in (["--repository", "trailofbits/other", "--workflow", REAL_WORKFLOW],
                  ["--repository", REAL_REPO, "--workflow",
                   ".github/workflows/release.yml@refs/tags/v0.1.3"]):
        refused = kbuild("verify", real_bundle, "--offline", *other, env=env)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert refused.stdout.startswith("FAILED bundle_v3_github.whl")
    data = bytearray(real_bundle.read_bytes())
    data[100] ^= 1
    real_bundle.write_bytes(bytes(data))
    changed = kbuild("verify", real_bundle, "--offline", "--repository", REAL_REPO,
                     "--workflow", REAL_WORKFLOW, env=env)
    assert changed.returncode == 1 and "signature verification failed" in changed.stdout


def test_an_unreachable_tuf_repository_is_one_error_naming_offline(real_bundle, tmp_path):
    proxy = f"http://127.0.0.1:{closed_port()}"  # nothing listens: unreachable anywhere
    env = clean_env(tmp_path, HTTPS_PROXY=proxy, https_proxy=proxy, NO_PROXY="", no_proxy="")
    proc = kbuild("verify", real_bundle, "--repository", REAL_REPO, "--workflow", REAL_WORKFLOW,
                  env=env)
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: cannot reach Sigstore's TUF repository") and "--offline" in line


# ----------------------------------------------------------------------------- fifth round


def test_verify_of_a_variants_metadata_json_checks_its_files(signed, sigstore, tmp_path):
    """`kbuild verify build/<v>/metadata.json` (or its bundle) verifies the variant: the
    signature covers metadata.json, which holds the digest of every other file."""
    from kbuild.publish.verify import TrustedSigners, verify
    project = fresh_copy(signed.project, tmp_path / "img2gray")
    folder = variants_of(project)["torch213-cxx11-cpu-x86_64-linux"]
    signers = TrustedSigners(GITHUB_REPO, (sigstore.signer_uri,))
    for target in (folder / "metadata.json", folder / SIGNATURE):
        (ok,) = verify(target, signers, trust=sigstore.config)
        assert (ok.target, ok.ok) == (folder.name, True) and "every file matches" in ok.text
    (so,) = folder.glob("*.so")
    data = bytearray(so.read_bytes())
    data[-1] ^= 1
    so.write_bytes(bytes(data))
    for target in (folder / "metadata.json", folder / SIGNATURE):
        (refused,) = verify(target, signers, trust=sigstore.config)
        assert (refused.target, refused.ok) == (folder.name, False)
        assert refused.text.startswith("files differ from the signed digest")
    proc = kbuild("verify", folder / "metadata.json", "--trust-config", sigstore.config,
                  "--repository", GITHUB_REPO, "--workflow", f"{WORKFLOW}@{REF}", env=signed.env)
    assert proc.returncode == 1 and proc.stdout.startswith(f"FAILED {folder.name}: files differ")


def test_signing_never_writes_through_a_link_at_a_temporary_path(signed, sigstore, tmp_path,
                                                                 monkeypatch):
    from kbuild.core.built import BuiltVariant
    from kbuild.publish.sign import sign_variants
    project = fresh_copy(signed.project, tmp_path / "img2gray")
    outside = tmp_path / "outside.txt"
    outside.write_text("not kbuild's")
    folders = list(variants_of(project).values())
    for folder in folders:  # where kbuild 0.x wrote its temporary bundle
        (folder / f".{SIGNATURE}.tmp").symlink_to(outside)
    for key, value in sigstore.github_env().items():
        monkeypatch.setenv(key, value)
    sign_variants([BuiltVariant.load(f) for f in folders],
                  SigningOptions(trust_config=sigstore.config), log=lambda _: None)
    assert outside.read_text() == "not kbuild's"
    for folder in folders:
        assert not (folder / SIGNATURE).is_symlink() and signature_state(folder).current
        assert sorted(p.name for p in folder.glob(f".{SIGNATURE}*")) == [f".{SIGNATURE}.tmp"]


def test_verify_with_a_tool_key_that_is_not_a_table_is_one_error_line(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    for text, key in (("tool = 5\n", "tool"), ("[tool]\nkbuild = 5\n", "tool.kbuild")):
        (project / "pixi.toml").write_text(text + '\n[workspace]\nname = "x"\n')
        proc = kbuild("verify", project, env=clean_env(tmp_path, COLUMNS="400"))
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert error_lines(proc) == [f"error: {project / 'pixi.toml'}: key `{key}`: must be a "
                                     "table"], proc.stderr


def test_kbuild_verify_json_lists_one_typed_result_per_variant(signed, sigstore, tmp_path):
    """`kbuild verify --json`: one object per variant, its result type (a closed set, as the
    loader's VerificationResult) and fields; "unsigned" and "signed by someone else" are two
    types, not two texts."""
    from kbuild.publish import results
    from kbuild.publish.verify import TrustedSigners, verify
    project = fresh_copy(signed.project, tmp_path / "img2gray")
    good, unsigned = sorted(variants_of(project).values())
    (unsigned / SIGNATURE).unlink()
    proc = kbuild("verify", project, "--trust-config", sigstore.config, "--repository", GITHUB_REPO,
                  "--workflow", f"{WORKFLOW}@{REF}", "--json", env=signed.env)
    assert proc.returncode == 1 and proc.stderr == "", proc.stderr
    found = json.loads(proc.stdout)
    assert [(r["result"], r["target"], r["ok"]) for r in found] == [
        ("Success", good.name, True), ("SignatureBundleMissing", unsigned.name, False)]
    assert found[0]["signer"]["repository"] == GITHUB_REPO
    assert found[0]["signer"]["workflow"] == sigstore.signer_uri and found[0]["variant"] is True
    assert found[1] == {"result": "SignatureBundleMissing", "target": unsigned.name, "ok": False,
                        "bundle": SIGNATURE, "variant": True,
                        "text": "not signed (no metadata.json.sigstore)"}
    elsewhere = f"https://github.com/{GITHUB_REPO}/.github/workflows/release.yml@refs/heads/main"
    (other,) = verify(good, TrustedSigners(GITHUB_REPO, (elsewhere,)), trust=sigstore.config)
    assert isinstance(other, results.SignerNotTrusted) and not other.ok
    assert other.signer.workflow == sigstore.signer_uri and other.to_json()["result"] == "SignerNotTrusted"
