"""`kbuild verify`'s results are a closed set of types (publish/results.py), each with the line
the command prints; the loader's data classes come from one shim (core/loader.py) that prefers
upstream's next module, `kernels_data`, to the pinned loader's `kernels._rust`."""

from __future__ import annotations

import sys
import typing
from types import ModuleType

from kbuild.core.loader import loader_data
from kbuild.publish import results
from kbuild.publish.sign import SignerIdentity

SIGNER = SignerIdentity("https://token.actions.githubusercontent.com", "s", "o/r",
                        "https://github.com/o/r/.github/workflows/b.yml@refs/heads/main")


def test_each_result_says_what_it_found():
    said = {
        results.Success("v", SIGNER): (True, f"signed by {SIGNER.describe()}; every file matches "
                                             "the digest"),
        results.Success("f", SIGNER, variant=False): (True, f"signed by {SIGNER.describe()}"),
        results.SignatureBundleMissing("v", "metadata.json.sigstore"):
            (False, "not signed (no metadata.json.sigstore)"),
        results.SignatureBundleMissing("f", "f.sigstore", variant=False):
            (False, "not signed (no f.sigstore beside it)"),
        results.MetadataMissing("v"): (False, "metadata.json is missing"),
        results.SignatureBundleInvalid("v", "invalid signature bundle: x"): (False, "invalid signature bundle: x"),
        results.SignatureVerificationFailure("v", "bad"): (False, "signature verification failed: bad"),
        results.SignerNotTrusted("v", SIGNER): (False, f"signature verification failed: signed by "
                                                       f"{SIGNER.describe()}, which is not a trusted "
                                                       "signer here"),
        results.MetadataInvalid("v", "x"): (False, "invalid metadata: x"),
        results.DigestMissing("v"): (False, "metadata.json has no digest"),
        results.DigestVerificationFailure("v", ("a", "b")): (False, "files differ from the signed digest: a; b"),
    }
    assert {type(r) for r in said} == set(typing.get_args(results.Result))
    for result, (ok, text) in said.items():
        assert (result.ok, result.text) == (ok, text)
        data = result.to_json()
        assert (data["result"], data["target"], data["ok"], data["text"]) == (
            type(result).__name__, result.target, ok, text)
    assert results.SignerNotTrusted("v", SIGNER).to_json()["signer"]["repository"] == "o/r"


def test_the_loaders_data_classes_come_from_kernels_data_first(monkeypatch):
    from kernels import _rust
    monkeypatch.setitem(sys.modules, "kernels_data", None)  # not installed: the pinned loader's
    assert loader_data() is _rust
    upstream = ModuleType("kernels_data")
    monkeypatch.setitem(sys.modules, "kernels_data", upstream)
    assert loader_data() is upstream
