"""Every CUDA kernel of img2gray, activation and rmsnorm on odd shapes,
small enough to run quickly under compute-sanitizer:

    compute-sanitizer --tool memcheck --error-exitcode 1 \\
        python3 gpu/sanitize.py --img2gray DIR --activation DIR [--rmsnorm DIR]

DIR is a built variant, a folder of variants or a project (what kernels.get_local_kernel
takes). PyTorch's caching allocator is turned off (PYTORCH_NO_CUDA_MEMORY_CACHING=1) so that
every tensor is its own cudaMalloc and memcheck sees a read or write one byte past its end.
Inputs are made and references computed on the CPU; every output buffer is poisoned first so
an element the kernel fails to write is caught, and strided outputs are checked for writes
into the gaps between rows. Covered: 1x1, 1xN, Nx1, 1023x517, empty tensors, sizes around
the 16-pixel / vector widths, a 9-megapixel image (2,198 full blocks and a 2,993-pixel
tail), inputs and outputs that are not 16-byte aligned, row-strided and non-row-strided
(transposed) inputs and outputs.
Exit status 1 when any output is wrong or any call raised.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from pathlib import Path

os.environ.setdefault("PYTORCH_NO_CUDA_MEMORY_CACHING", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

CUDA = torch.device("cuda")  # --device cpu: a smoke run of this script's own logic
TOL = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 2e-2}
failures: list[str] = []
passed = 0


def case(name: str, fn) -> None:
    global passed
    try:
        problem = fn()
        if CUDA.type == "cuda":
            torch.cuda.synchronize()
    except Exception as e:  # a CUDA error is sticky: the rest will fail too, and say so
        problem = f"{type(e).__name__}: {e}".splitlines()[0][:300]
        if os.environ.get("SANITIZE_TRACEBACK"):
            traceback.print_exc()
    if problem:
        failures.append(f"{name}: {problem}")
        print(f"FAIL {name}: {problem}", flush=True)
    else:
        passed += 1


# --- placing CPU tensors on the GPU -----------------------------------------------------------

def on_gpu(t: torch.Tensor, offset: int = 0) -> torch.Tensor:
    """A contiguous CUDA copy of `t` that ends exactly at the end of its allocation and starts
    `offset` elements into it (offset > 0: not 16-byte aligned)."""
    buf = torch.empty(t.numel() + offset, dtype=t.dtype, device=CUDA)
    view = buf[offset:].view(t.shape)
    view.copy_(t)
    return view


def row_strided(shape: tuple[int, ...], dtype, pad: int, fill=None) -> torch.Tensor:
    """A (rows, cols) CUDA tensor whose rows are `cols + pad` apart, allocation ending at its
    last element."""
    rows, cols = shape
    stride = cols + pad
    n = (rows - 1) * stride + cols if rows and cols else 0
    flat = torch.empty(n, dtype=dtype, device=CUDA)
    if fill is not None:
        flat.fill_(fill)
    return flat.as_strided((rows, cols), (stride, 1))


def gaps_untouched(t: torch.Tensor, poison) -> bool:
    """For a strided view over a flat buffer: are the elements outside the view still `poison`?"""
    if t.is_contiguous():
        return True
    base = t._base if t._base is not None else t
    flat = base.detach().reshape(-1).cpu() if base.is_contiguous() else None
    if flat is None or flat.numel() == t.numel():
        return True
    covered = torch.zeros(flat.numel(), dtype=torch.bool)
    covered.as_strided(t.shape, t.stride(), t.storage_offset() - base.storage_offset()).fill_(True)
    rest = flat[~covered]
    return bool(torch.isnan(rest).all()) if isinstance(poison, float) else bool((rest == poison).all())


def mismatch(out: torch.Tensor, ref: torch.Tensor, tol: float = 0.0) -> str | None:
    got = out.cpu()
    if got.shape != ref.shape:
        return f"shape {tuple(got.shape)} != {tuple(ref.shape)}"
    if got.numel() == 0:
        return None
    a, b = got.double(), ref.double()
    bad = torch.isnan(a) | ((a - b).abs() > tol + tol * b.abs())
    if bool(bad.any()):
        i = int(bad.reshape(-1).nonzero()[0])
        return (f"{int(bad.sum())} of {got.numel()} elements differ (first at flat index {i}: "
                f"{a.reshape(-1)[i].item()} vs {b.reshape(-1)[i].item()})")
    return None


# --- img2gray ----------------------------------------------------------------------------------

def gray_reference(rgb: torch.Tensor) -> torch.Tensor:
    x = rgb.float()
    return (x[..., 0] * 0.21 + x[..., 1] * 0.72 + x[..., 2] * 0.07).to(torch.uint8)


IMG_SHAPES = [(1, 1), (1, 2), (1, 15), (1, 16), (1, 17), (1, 1000), (17, 1), (1023, 1),
              (16, 16), (15, 17), (33, 31), (1023, 517), (0, 7), (7, 0),
              (3001, 3001)]  # 2,198 blocks of 4,096 pixels and a tail of 2,993
IMG_OFFSETS = [(0, 0), (1, 0), (0, 1), (5, 3)]  # (input, output) misalignment in bytes


def sanitize_img2gray(kernel) -> None:
    gen = torch.Generator().manual_seed(0)
    for h, w in IMG_SHAPES:
        rgb = torch.randint(0, 256, (h, w, 3), dtype=torch.uint8, generator=gen)
        ref = gray_reference(rgb)
        offsets = IMG_OFFSETS if h * w < 1 << 20 else IMG_OFFSETS[:2]
        for in_off, out_off in offsets:
            def run(in_off=in_off, out_off=out_off):
                x = on_gpu(rgb, in_off)
                out = on_gpu((ref.to(torch.int32) + 1).remainder(256).to(torch.uint8), out_off)
                got = kernel.img2gray_out(x, out)
                if got is not out:
                    return "img2gray_out did not return its out"
                return mismatch(out, ref)
            case(f"img2gray_out {h}x{w} in+{in_off} out+{out_off}", run)
        if h * w < 1 << 20:
            case(f"img2gray {h}x{w}", lambda: mismatch(kernel.img2gray(on_gpu(rgb)), ref))


# --- activation --------------------------------------------------------------------------------

def act_reference(op: str, x: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    if op in ("gelu_fast", "gelu_tanh"):
        y = F.gelu(xf, approximate="tanh")
    elif op == "gelu":
        y = F.gelu(xf)
    else:
        d = xf.shape[-1] // 2
        y = F.silu(xf[..., :d]) * xf[..., d:]
    return y.to(x.dtype)


UNARY_SHAPES = [(1,), (7,), (1, 1), (1, 1000), (1000, 1), (1023, 517), (3, 5, 7), (4, 4096),
                (2, 8), (0, 4), (33, 24)]
GATED_SHAPES = [(2,), (1, 2), (1, 1000), (1000, 2), (1023, 518), (3, 5, 14), (4, 8192),
                (2, 16), (0, 4), (33, 48)]
ACT_DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def out_shape(op: str, shape) -> tuple[int, ...]:
    return (*shape[:-1], shape[-1] // 2) if op == "silu_and_mul" else tuple(shape)


def sanitize_activation(kernel) -> None:
    gen = torch.Generator().manual_seed(0)
    nan = float("nan")
    for op in ("gelu_fast", "gelu_tanh", "gelu", "silu_and_mul"):
        fn = getattr(kernel, op)
        shapes = GATED_SHAPES if op == "silu_and_mul" else UNARY_SHAPES
        for dtype in ACT_DTYPES:
            tol = TOL[dtype]
            for shape in shapes:
                x_cpu = (3 * torch.randn(shape, generator=gen)).to(dtype)
                ref = act_reference(op, x_cpu)
                oshape = out_shape(op, shape)
                for in_off, out_off in [(0, 0), (1, 0), (0, 1), (3, 5)]:
                    def run(in_off=in_off, out_off=out_off):
                        x = on_gpu(x_cpu, in_off)
                        out = on_gpu(torch.full(oshape, nan, dtype=dtype), out_off)
                        if fn(out, x) is not out:
                            return f"{op} did not return its out"
                        return mismatch(out, ref, tol)
                    case(f"{op} {dtype} {shape} in+{in_off} out+{out_off}", run)
                functional = getattr(kernel.ops, f"{op}_functional")
                for in_off in (0, 1):
                    case(f"{op}_functional {dtype} {shape} in+{in_off}",
                         lambda in_off=in_off: mismatch(functional(on_gpu(x_cpu, in_off)), ref, tol))
            # 2-D layouts: row-strided and transposed inputs and outputs.
            rows, cols = (37, 10) if op == "silu_and_mul" else (37, 5)
            x_cpu = (3 * torch.randn(rows, cols, generator=gen)).to(dtype)
            ref = act_reference(op, x_cpu)
            ocols = out_shape(op, (rows, cols))[1]

            def strided_in(pad):
                x = row_strided((rows, cols), dtype, pad)
                x.copy_(x_cpu)
                return x

            def transposed_in():
                return on_gpu(x_cpu.t().contiguous()).t()

            def fresh_out():
                return on_gpu(torch.full((rows, ocols), nan, dtype=dtype))

            def strided_out(pad):
                return row_strided((rows, ocols), dtype, pad, fill=nan)

            def transposed_out():
                return on_gpu(torch.full((ocols, rows), nan, dtype=dtype)).t()

            layouts = {
                "x row-strided (pad 3)": (lambda: strided_in(3), fresh_out),
                "x row-strided (pad 8)": (lambda: strided_in(8), fresh_out),
                "x transposed": (transposed_in, fresh_out),
                "out row-strided (pad 1)": (lambda: on_gpu(x_cpu), lambda: strided_out(1)),
                "out row-strided (pad 8)": (lambda: on_gpu(x_cpu), lambda: strided_out(8)),
                "out transposed": (lambda: on_gpu(x_cpu), transposed_out),
                "both row-strided": (lambda: strided_in(5), lambda: strided_out(2)),
            }
            for label, (make_x, make_out) in layouts.items():
                def run(make_x=make_x, make_out=make_out):
                    x, out = make_x(), make_out()
                    if fn(out, x) is not out:
                        return f"{op} did not return its out"
                    if not gaps_untouched(out, nan):
                        return "wrote between the rows of a strided out"
                    return mismatch(out, ref, tol)
                case(f"{op} {dtype} {rows}x{cols} {label}", run)


# --- rmsnorm ------------------------------------------------------------------------------------

# Every launch path of the CUDA kernel: rows of 1, 2, 4 and 8 packs per thread (up to 512
# threads per row), several rows per block (short rows), the two-pass kernel (rows longer than
# 4096 packs, and rows that are not whole 16-byte packs), row counts that leave a block partly
# empty, empty tensors.
RMS_SHAPES = [(1, 1), (1, 7), (3, 1), (1023, 517), (2, 4096), (5, 3, 17), (0, 8), (4, 8193),
              (3, 8), (33, 64), (7, 200), (9, 2048), (5, 4096), (3, 8192), (2, 16384),
              (2, 32768), (2, 36864), (1, 40000), (130, 24)]


def sanitize_rmsnorm(kernel) -> None:
    gen = torch.Generator().manual_seed(0)
    for dtype in ACT_DTYPES:
        tol = 1e-4 if dtype == torch.float32 else 2e-2
        for shape in RMS_SHAPES:
            x_cpu = torch.randn(shape, generator=gen).to(dtype)
            w_cpu = (1 + 0.1 * torch.randn(shape[-1], generator=gen)).to(dtype)
            ref = kernel.rms_norm_reference(x_cpu, w_cpu, 1e-6)
            for off in (0, 1):
                case(f"rms_norm {dtype} {shape} x+{off}",
                     lambda off=off: mismatch(kernel.rms_norm(on_gpu(x_cpu, off), on_gpu(w_cpu), 1e-6),
                                              ref, tol))
            if dtype != torch.float32:  # a float32 weight: the kernels' mixed-type path
                w32 = w_cpu.float()
                ref32 = kernel.rms_norm_reference(x_cpu, w32, 1e-6)
                case(f"rms_norm {dtype} {shape} float32 weight",
                     lambda: mismatch(kernel.rms_norm(on_gpu(x_cpu), on_gpu(w32), 1e-6), ref32, tol))
        x_cpu = torch.randn(37, 24, generator=gen).to(dtype)
        w_cpu = torch.randn(24, generator=gen).to(dtype)
        ref = kernel.rms_norm_reference(x_cpu, w_cpu, 1e-6)

        def strided(pad):
            x = row_strided((37, 24), dtype, pad)
            x.copy_(x_cpu)
            return mismatch(kernel.rms_norm(x, on_gpu(w_cpu), 1e-6), ref, tol)

        case(f"rms_norm {dtype} 37x24 row-strided (pad 3)", lambda: strided(3))
        case(f"rms_norm {dtype} 37x24 row-strided (pad 8)", lambda: strided(8))
        case(f"rms_norm {dtype} 37x24 transposed",
             lambda: mismatch(kernel.rms_norm(on_gpu(x_cpu.t().contiguous()).t(), on_gpu(w_cpu),
                                              1e-6), ref, tol))
        case(f"rms_norm {dtype} 37x24 weight+1",
             lambda: mismatch(kernel.rms_norm(on_gpu(x_cpu), on_gpu(w_cpu, 1), 1e-6), ref, tol))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--img2gray", type=Path, help="img2gray variant / build folder / project")
    p.add_argument("--activation", type=Path, help="activation variant / build folder / project")
    p.add_argument("--rmsnorm", type=Path, help="rmsnorm variant / build folder / project")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help=argparse.SUPPRESS)
    args = p.parse_args()
    global CUDA
    CUDA = torch.device(args.device)
    if CUDA.type == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device")
    from kernels import get_local_kernel

    where = torch.cuda.get_device_name() if CUDA.type == "cuda" else "cpu (smoke run)"
    print(f"torch {torch.__version__}, {where}, caching allocator "
          f"{'off' if os.environ.get('PYTORCH_NO_CUDA_MEMORY_CACHING') == '1' else 'ON'}", flush=True)
    for name, run in (("img2gray", sanitize_img2gray), ("activation", sanitize_activation),
                      ("rmsnorm", sanitize_rmsnorm)):
        path = getattr(args, name)
        if path is None:
            continue
        before = passed + len(failures)
        try:
            kernel = get_local_kernel(path.resolve(), backend=CUDA.type)
        except Exception as e:
            failures.append(f"{name}: cannot load from {path}: {type(e).__name__}: {e}")
            print(failures[-1], flush=True)
            continue
        run(kernel)
        print(f"{name}: {passed + len(failures) - before} cases run", flush=True)
    print(f"sanitize.py: {passed} passed, {len(failures)} failed", flush=True)
    for f in failures[:50]:
        print(f"  {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
