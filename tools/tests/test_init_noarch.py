"""`kbuild init --noarch`: the Python-only scaffold builds (no compiler) and its op works through
the real `kernels` loader, under opcheck and torch.compile."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kbuild.stages import pipeline
from kbuild.stages.check import check_variant
from kbuild import scaffold as init_cli


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    from kernels import get_local_kernel

    project = tmp_path_factory.mktemp("noarch") / "tiny-op"
    init_cli.create(project, init_cli.InitOptions("tiny-op", "org/tiny-op", ("cpu", "cuda"), True),
                    git=False)
    results = pipeline.build(project)
    assert sorted(r.variant for r in results) == ["torch-cpu", "torch-cuda"]
    for r in results:
        assert check_variant(r.path, load=False).ok
    return get_local_kernel(project, backend="cpu")


def test_noarch_op_matches_reference_and_checks_input(kernel):
    x = torch.randn(33, 65)
    torch.testing.assert_close(kernel.tiny_op(x, 0.3), F.leaky_relu(x, 0.3))
    out = torch.empty_like(x)
    assert kernel.tiny_op(x, out=out) is out
    with pytest.raises(TypeError, match="torch.float32"):
        kernel.tiny_op(x.double())


def test_noarch_op_passes_opcheck_and_compiles(kernel):
    x = torch.randn(5, 7)
    torch.library.opcheck(kernel.ops.tiny_op.default, (torch.empty_like(x), x, 0.1))
    compiled = torch.compile(lambda t: kernel.tiny_op(t * 2.0, 0.1), fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x), F.leaky_relu(x * 2.0, 0.1))
