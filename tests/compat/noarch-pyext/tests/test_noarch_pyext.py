"""noarch + pyext: the JSON ships, the notes do not."""

import os
from pathlib import Path

import torch
from kernels import get_local_kernel

PROJECT = Path(__file__).resolve().parents[1]
BACKEND = os.environ.get("KBUILD_COMPAT_BACKEND") or ("cuda" if torch.cuda.is_available() else "cpu")
kernel = get_local_kernel(PROJECT, backend=BACKEND)


def test_lookup_uses_the_shipped_table():
    x = torch.tensor([3, 0, 1])
    assert kernel.lookup(x).tolist() == [40, 10, 20]


def test_notes_are_not_shipped():
    assert not (Path(kernel.__file__).parent / "notes.txt").exists()
