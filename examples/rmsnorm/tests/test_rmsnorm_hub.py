"""kernelize with a LayerRepository served by a Hub: upload the rmsnorm build to the local
Hub-compatible server, then map LlamaRMSNorm to it in a fresh process, as a user would."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import huggingface_hub
import pytest
from packaging.version import Version

from kbuild.publish import upload as publish
from kbuild_hub.server import HubServer

PROJECT = Path(__file__).resolve().parents[1]
REPO_ID = "kernels-test/rmsnorm"
TOKEN = "hf_test_token"

USER_SCRIPT = textwrap.dedent("""
    import copy, torch, torch.nn as nn
    from kernels import LayerRepository, Mode, kernelize, use_kernel_forward_from_hub, use_kernel_mapping

    @use_kernel_forward_from_hub("LlamaRMSNorm")
    class RMSNorm(nn.Module):
        def __init__(self, hidden_size, eps=1e-6):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(hidden_size))
            self.variance_epsilon = eps

        def forward(self, x):
            dtype = x.dtype
            h = x.to(torch.float32)
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
            return self.weight * h.to(dtype)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear1, self.norm = nn.Linear(128, 256), RMSNorm(256)
            self.act, self.linear2 = nn.GELU(), nn.Linear(256, 10)

        def forward(self, x):
            return self.linear2(self.act(self.norm(self.linear1(x))))

    torch.manual_seed(42)
    model = Model().eval()
    with torch.no_grad():
        for m in (model.linear1, model.linear2):
            m.weight.fill_(1); m.bias.zero_()
    reference = copy.deepcopy(model)
    original_forward = RMSNorm.forward
    mapping = {"LlamaRMSNorm": {"cpu": LayerRepository(repo_id=%r, layer_name="LlamaRMSNorm",
                                                        version=1)}}
    with use_kernel_mapping(mapping, inherit_mapping=False):
        kernelize(model, mode=Mode.INFERENCE, device="cpu")
    assert model.norm.forward.__func__ is not original_forward
    assert type(model.norm) is RMSNorm and str(model) == str(reference)
    x = torch.randn(32, 128)
    with torch.no_grad():
        torch.testing.assert_close(model(x), reference(x), rtol=1e-4, atol=1e-4)
    print("kernelized", model.norm.forward.__func__.__module__)
""") % REPO_ID


@pytest.mark.skipif(Version(huggingface_hub.__version__) < Version("2.3"),
                    reason="uploading to a kernel repo needs huggingface_hub >= 2.3")
def test_kernelize_from_hub_layer_repository(rmsnorm_repo, tmp_path):
    with HubServer(token=TOKEN) as hub:
        options = publish.UploadOptions(build_dir=rmsnorm_repo / "build", endpoint=hub.url,
                                        token=TOKEN, allow_dirty=True, load=False)
        result = publish.upload(PROJECT, options, log=lambda _: None, warn=lambda _: None)
        assert result.status == "uploaded"
        env = dict(os.environ, HF_ENDPOINT=hub.url, HF_TOKEN=TOKEN, HF_HOME=str(tmp_path / "hf"))
        env.pop("HF_HUB_OFFLINE", None)
        proc = subprocess.run([sys.executable, "-c", USER_SCRIPT], capture_output=True,
                              text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "kernelized _rmsnorm_cpu_" in proc.stdout
        assert any("/resolve/" in path for _, path, _ in hub.requests)  # fetched from the Hub
