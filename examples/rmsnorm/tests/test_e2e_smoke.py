"""benchmarks/e2e_llama.py --smoke: a tiny transformers Llama model kernelized with this kernel
(and the activation kernel), on the GPU when there is one; needs transformers, skipped
without it."""

import importlib.util
import json
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[3]


def test_e2e_llama_smoke(rmsnorm_repo, tmp_path):
    pytest.importorskip("transformers")
    from kbuild.stages.pipeline import build

    activation_repo = tmp_path / "activation"
    build(REPO / "examples" / "activation", build_dir=activation_repo / "build")
    spec = importlib.util.spec_from_file_location("e2e_llama", REPO / "benchmarks" / "e2e_llama.py")
    e2e = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(e2e)
    out = tmp_path / "out"
    assert e2e.main(["--rmsnorm", str(rmsnorm_repo), "--activation", str(activation_repo),
                     "--out", str(out), "--device", "cuda" if torch.cuda.is_available() else "cpu",
                     "--smoke"]) == 0
    result = json.loads((out / "e2e_llama.json").read_text())
    v = result["variants"]
    assert v["kernelized"]["kernelized_layers"] == {"LlamaRMSNorm": 5}  # 2 layers x 2 + final
    assert v["gated-kernelized"]["kernelized_layers"] == {"LlamaRMSNorm": 5, "SiluAndMul": 2}
    assert all(len(r["tokens"]) == result["new_tokens"] for r in v.values())
    assert v["kernelized"]["last_logits_max_abs_diff"] < 1e-3
