"""img2gray against the PyTorch reference. Tolerance: exact (atol = 0) — the kernels evaluate
the same float32 expression in the same order without FMA contraction."""

import json
import os
import subprocess
import sys

import pytest
import torch
from pathlib import Path

from reference import img2gray_reference

PROJECT = Path(__file__).resolve().parents[1]
SHAPES = [(1, 1), (1, 257), (311, 1), (1023, 517), (64, 64), (17, 33), (2160, 3840)]


def random_image(h, w, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (h, w, 3), dtype=torch.uint8, generator=g).to(device)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_matches_reference(kernel, device, shape):
    image = random_image(*shape, device, seed=shape[0] * 7 + shape[1])
    gray = kernel.img2gray(image)
    assert gray.shape == shape and gray.dtype == torch.uint8 and gray.device == image.device
    torch.testing.assert_close(gray, img2gray_reference(image), rtol=0, atol=0)


def test_extreme_values(kernel, device):
    values = torch.tensor([0, 1, 127, 128, 254, 255], dtype=torch.uint8)
    combos = torch.cartesian_prod(values, values, values).reshape(-1, 1, 3).to(device)
    torch.testing.assert_close(kernel.img2gray(combos), img2gray_reference(combos), rtol=0, atol=0)
    white = torch.full((3, 5, 3), 255, dtype=torch.uint8, device=device)
    assert int(kernel.img2gray(white).max()) == 255  # 0.21 + 0.72 + 0.07 == 1


def test_out_variant_and_empty(kernel, device):
    image = random_image(9, 13, device)
    out = torch.empty(9, 13, dtype=torch.uint8, device=device)
    assert kernel.img2gray_out(image, out) is out
    torch.testing.assert_close(out, img2gray_reference(image), rtol=0, atol=0)
    assert kernel.img2gray(torch.empty(0, 4, 3, dtype=torch.uint8, device=device)).shape == (0, 4)


@pytest.mark.parametrize("bad, error, words", [
    (torch.zeros(4, 4, 3, dtype=torch.float32), TypeError, "torch.uint8"),
    (torch.zeros(4, 4, dtype=torch.uint8), ValueError, "(H, W, 3)"),
    (torch.zeros(4, 4, 4, dtype=torch.uint8), ValueError, "(H, W, 3)"),
    (torch.zeros(2, 4, 4, 3, dtype=torch.uint8), ValueError, "(H, W, 3)"),
    (torch.zeros(4, 6, 3, dtype=torch.uint8)[:, ::2], ValueError, "contiguous"),
    ([[1, 2, 3]], TypeError, "torch.Tensor"),
])
def test_bad_input_is_explained(kernel, bad, error, words):
    with pytest.raises(error, match=__import__("re").escape(words)):
        kernel.img2gray(bad)


def test_op_checks_its_arguments(kernel):
    ops = kernel._ops.ops
    with pytest.raises(RuntimeError, match="output must have shape"):
        ops.img2gray(torch.zeros(4, 4, 3, dtype=torch.uint8), torch.zeros(4, 5, dtype=torch.uint8))


def test_opcheck(kernel, device):
    op = kernel._ops.ops.img2gray.default
    for shape in [(5, 7), (1, 1), (32, 48)]:
        image = random_image(*shape, device)
        out = torch.empty(shape, dtype=torch.uint8, device=device)
        torch.library.opcheck(op, (image, out))


def test_torch_compile_fullgraph(kernel, device):
    def pipeline(image):
        return kernel.img2gray(image).to(torch.float32) / 255.0

    compiled = torch.compile(pipeline, fullgraph=True)
    for shape in [(8, 8), (31, 17)]:
        image = random_image(*shape, device)
        torch.testing.assert_close(compiled(image), pipeline(image), rtol=0, atol=0)


def test_registered_on_expected_dispatch_keys(kernel):
    name = kernel._ops.add_op_namespace_prefix("img2gray")
    assert torch._C._dispatch_has_kernel_for_dispatch_key(name, "CPU")


def test_loads_through_local_kernels_and_get_kernel(variant_dir, device):
    """LOCAL_KERNELS + get_kernel(..., version=1), in a fresh process as a user would."""
    code = (
        "import torch, kernels\n"
        f"k = kernels.get_kernel('kernels-test/img2gray', version=1, backend={device!r})\n"
        f"x = torch.randint(0, 256, (33, 65, 3), dtype=torch.uint8, device={device!r})\n"
        "ref = ((x.float()[..., 0] * 0.21 + x.float()[..., 1] * 0.72 + x.float()[..., 2] * 0.07)"
        ".to(torch.uint8))\n"
        "assert torch.equal(k.img2gray(x), ref)\n"
        "print(k.__name__)\n")
    env = dict(os.environ, LOCAL_KERNELS=f"kernels-test/img2gray={PROJECT}", HF_HUB_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    meta = json.loads((variant_dir / "metadata.json").read_text())
    assert proc.stdout.strip() == meta["id"]


def test_a_second_load_of_this_build_in_one_process(kernel, variant_dir, device, tmp_path,
                                                     monkeypatch):
    """The same build loaded again from another folder in this process registers no second
    fake kernel: torch before 2.13 refuses one, so registration is made as strict here."""
    import functools
    import inspect
    import shutil

    from kernels import get_local_kernel

    if "allow_override" in inspect.signature(torch.library.register_fake).parameters:
        monkeypatch.setattr(torch.library, "register_fake", functools.partial(
            torch.library.register_fake, allow_override=False))
    shutil.copytree(variant_dir, tmp_path / "build" / variant_dir.name)
    again = get_local_kernel(tmp_path, backend=device)
    assert again is not kernel
    image = random_image(5, 7, device)
    torch.testing.assert_close(again.img2gray(image), kernel.img2gray(image), rtol=0, atol=0)
    compiled = torch.compile(again.img2gray, fullgraph=True)
    torch.testing.assert_close(compiled(image), img2gray_reference(image), rtol=0, atol=0)
