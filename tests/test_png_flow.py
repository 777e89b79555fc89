"""The reference sanity flow: a PNG read with PIL, converted, written back as grayscale PNG."""

import numpy as np
import pytest
import torch

from reference import img2gray_reference

PIL = pytest.importorskip("PIL.Image")


def make_png(path):
    """A real RGB PNG with smooth gradients and hard edges (odd size on purpose)."""
    w, h = 321, 203
    r = PIL.linear_gradient("L").resize((w, h))
    g = PIL.radial_gradient("L").resize((w, h))
    b = PIL.effect_mandelbrot((w, h), (-2.0, -1.2, 0.8, 1.2), 64)
    PIL.merge("RGB", (r, g, b)).save(path)


def test_png_roundtrip(kernel, device, tmp_path):
    src, dst = tmp_path / "in.png", tmp_path / "gray.png"
    make_png(src)
    with PIL.open(src) as im:
        assert im.mode == "RGB"
        rgb = torch.from_numpy(np.array(im)).to(device)
    gray = kernel.img2gray(rgb)
    PIL.fromarray(gray.cpu().numpy(), mode="L").save(dst)
    with PIL.open(dst) as back:
        assert back.mode == "L" and back.size == (rgb.shape[1], rgb.shape[0])
        written = torch.from_numpy(np.array(back))
    expected = img2gray_reference(rgb.cpu())
    torch.testing.assert_close(written, expected, rtol=0, atol=0)
    assert written.float().std() > 10  # a real picture, not a constant
