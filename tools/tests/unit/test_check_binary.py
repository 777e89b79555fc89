"""What check reads from a built .so without a GPU or toolkit: fat-binary coverage of declared
CUDA capabilities, HIP offload bundles, unresolved symbols and the torch stable-ABI rule."""

from __future__ import annotations

import shutil
import struct
import subprocess

import pytest

from kbuild.stages.check import binary
from kbuild.stages.check.binary import CudaCode, cuda_coverage_problems, parse_fatbin


def entry(arch: int, *, ptx: bool = False, suffix: str = "", payload: bytes = b"\0" * 16) -> bytes:
    """One fat-binary entry as nvcc 13 writes it (64-byte header, arch at 28, flags at 40)."""
    flags = 0x11 | {"": 0, "a": 0x100000, "f": 0x200000}[suffix]
    header = struct.pack("<HHIQ", 1 if ptx else 2, 0x101, 64, len(payload))
    header += struct.pack("<IIII", 0, 0, 0x10008, arch) + struct.pack("<III", 0, 0, flags)
    return header + b"\0" * (64 - len(header)) + payload


def fatbin(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", binary.FATBIN_MAGIC, 1, 16, len(body)) + body


def test_parse_fatbin_reads_every_translation_unit():
    data = fatbin(entry(80), entry(90, suffix="a")) + b"\0" * 8 + fatbin(entry(86), entry(120, ptx=True))
    assert [c.name for c in parse_fatbin(data)] == ["sm_80", "sm_86", "sm_90a", "compute_120"]


@pytest.mark.parametrize("codes, caps, problems", [
    (["sm_80", "sm_90"], ["8.0", "8.6", "9.0"], []),                       # 8.6 runs sm_80 SASS
    (["sm_80"], ["9.0"], ["no code for capability 9.0"]),                  # no cross-major SASS
    (["sm_80", "compute_80"], ["9.0", "12.0"], []),                        # PTX JITs upwards
    (["compute_90"], ["8.0"], ["no code for capability 8.0"]),             # … never downwards
    (["sm_90"], ["9.0a"], ["no code for capability 9.0a"]),                # 'a' needs sm_90a
    (["sm_90a"], ["9.0a", "9.0"], []),
    (["sm_90a"], ["10.0"], ["no code for capability 10.0"]),               # sm_90a is not portable
    (["sm_100f"], ["10.0f", "10.3", "10.3f"], []),                        # family code
    (["sm_120"], ["12.0+PTX"], ["no PTX for capability 12.0+PTX"]),
    (["sm_120", "compute_120"], ["12.0+PTX"], []),
    (["sm_75"], ["7.5", "weird"], ["capability 'weird' is not a CUDA capability"]),
])
def test_cuda_coverage_rules(codes, caps, problems):
    def code(name: str) -> CudaCode:
        kind, num = name.split("_")
        suffix = num[-1] if num[-1] in "af" else ""
        digits = num.rstrip("af")
        return CudaCode(int(digits[:-1]), int(digits[-1]), suffix, kind == "compute")
    assert cuda_coverage_problems([code(c) for c in codes], caps) == problems


def test_offload_bundles_name_their_gfx_targets():
    ids = [b"host-x86_64-unknown-linux-gnu-", b"hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-",
           b"hipv4-amdgcn-amd-amdhsa--gfx942"]
    body = binary.BUNDLE_MAGIC + struct.pack("<Q", len(ids))
    for i in ids:
        body += struct.pack("<QQQ", 0, 0, len(i)) + i
    targets, compressed = binary.parse_offload_bundles(body + b"\0" * 32)
    assert not compressed and len(targets) == 3
    assert binary.rocm_coverage_problems(targets, ["gfx90a", "gfx942", "gfx1100"]) == [
        "no code object for gfx1100"]


needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")


@needs_cc
def test_unresolved_symbols_are_named(tmp_path):
    (tmp_path / "lib.c").write_text("int provided(void) { return 1; }\n")
    (tmp_path / "user.c").write_text(
        "int provided(void); int missing_fn(int); __attribute__((weak)) int optional_fn(void);\n"
        "int PyFoo_Bar(void);\n"
        "int use(void) { return provided() + missing_fn(2) + (optional_fn ? optional_fn() : 0)"
        " + PyFoo_Bar(); }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", tmp_path / "libprov.so", tmp_path / "lib.c"], check=True)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", tmp_path / "user.so", tmp_path / "user.c",
                    f"-L{tmp_path}", "-lprov"], check=True)
    # Weak symbols and the Python API (provided by the interpreter) are not unresolved.
    assert binary.unresolved_symbols(tmp_path / "user.so", [tmp_path]) == ["missing_fn"]


@needs_cc
@pytest.mark.parametrize("hash_style", ["gnu", "sysv", "both"])
def test_dynamic_reader_agrees_with_pyelftools(tmp_path, hash_style):
    """The program-header reader (what the post-link check uses for torch's libraries) gives
    pyelftools' DT_NEEDED, RUNPATH and defined symbols, with either hash table."""
    from elftools.elf.elffile import ELFFile

    names = [f"fn_{i}_{'x' * (i % 300)}" for i in range(400)]  # long names cross read chunks
    (tmp_path / "lib.c").write_text(
        "".join(f"int {n}(void) {{ return {i}; }}\n" for i, n in enumerate(names))
        + "int imported(void); int call(void) { return imported(); }\n")
    (tmp_path / "prov.c").write_text("int imported(void) { return 7; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", tmp_path / "libprov.so", tmp_path / "prov.c"],
                   check=True)
    lib = tmp_path / "libmany.so"
    subprocess.run(["cc", "-shared", "-fPIC", f"-Wl,--hash-style={hash_style}",
                    "-Wl,-rpath,$ORIGIN/a:/opt/b", "-o", lib, tmp_path / "lib.c", f"-L{tmp_path}",
                    "-lprov"], check=True)
    with lib.open("rb") as f:
        elf = ELFFile(f)
        tags = list(elf.get_section_by_name(".dynamic").iter_tags())
        needed = [t.needed for t in tags if t.entry.d_tag == "DT_NEEDED"]
        paths = [getattr(t, "rpath", None) or t.runpath for t in tags
                 if t.entry.d_tag in ("DT_RPATH", "DT_RUNPATH")]
        defined = {s.name for s in elf.get_section_by_name(".dynsym").iter_symbols()
                   if s.name and s["st_shndx"] != "SHN_UNDEF"}
    assert binary.elf_dynamic(lib) == (needed, paths) and "libprov.so" in needed
    assert paths == ["$ORIGIN/a:/opt/b"]
    asked = set(names) | {"imported", "no_such_fn", "fn_1"}
    assert binary._defines(lib, asked) == defined & asked == set(names)


def test_stable_abi_rule_flags_torch_cpp_symbols():
    names = ["_ZN3c106detail14torchCheckFailEPKcS2_jS2_", "_ZNK2at10TensorBase5dtypeEv",
             "_ZN5torch6stable6detail3fooEv", "_ZN5torch7Library4implEv", "aoti_torch_empty_strided",
             "_ZNSt6vectorIN3c106SymIntEE9push_backEv", "memcpy"]
    flagged = [n for n in names if binary._NON_STABLE.match(n)]
    assert flagged == ["_ZN3c106detail14torchCheckFailEPKcS2_jS2_", "_ZNK2at10TensorBase5dtypeEv",
                       "_ZN5torch7Library4implEv"]


def test_demangle_names_symbols_as_source(monkeypatch):
    if shutil.which("c++filt") is None:
        pytest.skip("no c++filt")
    assert binary.demangle(["_Z10scale_cudaPKfPflf"]) == {
        "_Z10scale_cudaPKfPflf": "scale_cuda(float const*, float*, long, float)"}
    monkeypatch.setattr(binary.shutil, "which", lambda _: None)
    assert binary.demangle(["_Z1fv"]) == {"_Z1fv": "_Z1fv"}


def test_code_problems_of_a_variant_without_gpu_code(tmp_path):
    from kbuild.stages.check import code_problems
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    (tmp_path / "a.c").write_text("int f(void) { return 0; }\n")
    so = tmp_path / "a.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", so, tmp_path / "a.c"], check=True)
    problems = code_problems(so, "cuda", ["8.0", "9.0"], stable=False)
    assert [p.code for p in problems] == ["code.capability"] * 2
    assert "no code for capability 8.0 (the fat binary holds none)" in problems[0]
    assert code_problems(so, "cpu", [], stable=True) == []
