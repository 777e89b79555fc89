"""What a built `.so` contains, read from its ELF file (no compiler, loader or GPU needed).

- `unresolved_symbols`: undefined symbols no library it loads defines (the loader would refuse
  the import; found here at build time, by name).
- `non_stable_symbols`: torch C++ symbols a stable-ABI variant must not use.
- `cuda_code` / `cuda_coverage_problems`: the SASS and PTX in the CUDA fat binary
  (`.nv_fatbin`), and the declared capabilities it cannot run on.
- `rocm_targets` / `rocm_coverage_problems`: the same for HIP offload bundles (`.hip_fatbin`).
- `built_as`: the variant name this builder compiled it as (`.kbuild.variant`).
"""

from __future__ import annotations

import platform
import re
import shutil
import struct
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.hash import ELFHashSection, GNUHashSection

from ...core.runner import capture

PYTHON_API = re.compile(r"^_?Py")  # provided by the interpreter (abi3 is checked elsewhere)


# --- symbols ---------------------------------------------------------------------------------

def undefined_symbols(so: Path, *, weak: bool = False) -> list[str]:
    """Names of the undefined dynamic symbols of `so` (strong ones only unless `weak`)."""
    with so.open("rb") as f:
        dynsym = ELFFile(f).get_section_by_name(".dynsym")
        if dynsym is None:
            return []
        names = []
        for sym in dynsym.iter_symbols():
            if not sym.name or sym["st_shndx"] != "SHN_UNDEF":
                continue
            if sym["st_info"]["bind"] == "STB_WEAK" and not weak:
                continue
            names.append(sym.name)
    return names


def _system_dirs() -> list[Path]:
    triple = f"{platform.machine()}-linux-gnu"
    dirs = [f"/lib/{triple}", f"/usr/lib/{triple}", "/lib64", "/usr/lib64", "/lib", "/usr/lib"]
    return [Path(d) for d in dirs if Path(d).is_dir()]


@lru_cache(maxsize=None)
def _compiler_lib(name: str) -> Path | None:
    """libstdc++/libgcc_s of the host compiler (a conda or custom toolchain has its own)."""
    from ..toolchain import find_cxx
    try:
        out = capture([find_cxx(), f"-print-file-name={name}"]).stdout.strip()
    except Exception:  # no compiler: the system dirs are all there is
        return None
    return Path(out).parent if out and Path(out).is_absolute() and Path(out).exists() else None


class Dynamic:
    """The dynamic section of a 64-bit little-endian ELF file (x86_64, aarch64), read through
    its program headers: DT_NEEDED, RPATH/RUNPATH and a lookup of the symbols it defines by its
    hash table. A handful of reads per library, where pyelftools parses every section (and every
    hash table) of torch's libraries first. `read` is None for any other file."""

    PT_LOAD, PT_DYNAMIC = 1, 2
    DT_NEEDED, DT_HASH, DT_STRTAB, DT_SYMTAB, DT_RPATH, DT_RUNPATH = 1, 4, 5, 6, 15, 29
    DT_GNU_HASH = 0x6FFFFEF5
    SYM = struct.Struct("<IBBHQQ")  # Elf64_Sym

    def __init__(self, f, loads: list[tuple[int, int, int]], tags: list[tuple[int, int]]):
        self.f, self.loads, self.tags = f, loads, tags
        first = {t: v for t, v in reversed(tags)}
        self.strtab = self._offset(first.get(self.DT_STRTAB))
        self.symtab = self._offset(first.get(self.DT_SYMTAB))
        self.gnu_hash = self._offset(first.get(self.DT_GNU_HASH))
        self.sysv_hash = self._offset(first.get(self.DT_HASH))

    @classmethod
    def read(cls, f) -> Dynamic | None:
        head = f.read(64)
        if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
            return None
        phoff, = struct.unpack_from("<Q", head, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
        f.seek(phoff)
        table = f.read(phentsize * phnum)
        loads, dynamic = [], None
        for i in range(phnum):
            p_type, _, p_offset, p_vaddr, _, p_filesz, _, _ = struct.unpack_from(
                "<IIQQQQQQ", table, i * phentsize)
            if p_type == cls.PT_LOAD:
                loads.append((p_vaddr, p_offset, p_filesz))
            elif p_type == cls.PT_DYNAMIC:
                dynamic = (p_offset, p_filesz)
        if dynamic is None:
            return None
        f.seek(dynamic[0])
        raw = f.read(dynamic[1])
        tags = []
        for tag, value in struct.iter_unpack("<qQ", raw[:len(raw) // 16 * 16]):
            if tag == 0:
                break
            tags.append((tag, value))
        return cls(f, loads, tags)

    def _offset(self, vaddr: int | None) -> int | None:
        for start, offset, size in self.loads if vaddr is not None else ():
            if start <= vaddr < start + size:
                return vaddr - start + offset
        return None

    def _string(self, at: int) -> str:
        self.f.seek(self.strtab + at)
        out = b""
        while b"\0" not in out:
            chunk = self.f.read(256)
            if not chunk:
                break
            out += chunk
        return out.split(b"\0", 1)[0].decode("utf-8", "replace")

    def strings(self, *tags: int) -> list[str]:
        if self.strtab is None:
            return []
        return [self._string(v) for t, v in self.tags if t in tags]

    def _symbol(self, index: int) -> tuple[str, int]:
        self.f.seek(self.symtab + index * self.SYM.size)
        name, _, _, shndx, _, _ = self.SYM.unpack(self.f.read(self.SYM.size))
        return self._string(name), shndx

    def _words(self, at: int, count: int) -> tuple[int, ...]:
        self.f.seek(at)
        return struct.unpack(f"<{count}I", self.f.read(4 * count))

    def defines(self, names: set[str]) -> set[str]:
        """The names of `names` this library defines (its hash table's answer)."""
        if self.symtab is None or self.strtab is None:
            return set()
        if self.gnu_hash is not None:
            nbuckets, symoffset, bloom_size, _ = self._words(self.gnu_hash, 4)
            buckets_at = self.gnu_hash + 16 + 8 * bloom_size
            buckets = self._words(buckets_at, nbuckets)
            chains_at = buckets_at + 4 * nbuckets
            return {n for n in names if self._gnu_defines(n, buckets, symoffset, chains_at)}
        if self.sysv_hash is not None:
            nbucket, nchain = self._words(self.sysv_hash, 2)
            buckets = self._words(self.sysv_hash + 8, nbucket)
            chains = self._words(self.sysv_hash + 8 + 4 * nbucket, nchain)
            found = set()
            for n in names:
                i = buckets[_sysv_hash(n) % nbucket] if nbucket else 0
                while i:
                    name, shndx = self._symbol(i)
                    if name == n:
                        if shndx != 0:
                            found.add(n)
                        break
                    i = chains[i] if i < nchain else 0
            return found
        return set()

    def _gnu_defines(self, name: str, buckets, symoffset: int, chains_at: int) -> bool:
        h = _gnu_hash(name)
        i = buckets[h % len(buckets)] if buckets else 0
        if i < symoffset:
            return False
        while True:
            chain, = self._words(chains_at + 4 * (i - symoffset), 1)
            if chain | 1 == h | 1:
                found, shndx = self._symbol(i)
                if found == name:
                    return shndx != 0
            if chain & 1:
                return False
            i += 1


def _gnu_hash(name: str) -> int:
    h = 5381
    for c in name.encode():
        h = (h * 33 + c) & 0xFFFFFFFF
    return h


def _sysv_hash(name: str) -> int:
    h = 0
    for c in name.encode():
        h = (h << 4) + c
        g = h & 0xF0000000
        h = (h ^ (g >> 24)) & ~g & 0xFFFFFFFF
    return h


def elf_dynamic(path: Path) -> tuple[list[str], list[str]]:
    """(DT_NEEDED entries, RPATH/RUNPATH entries) of a shared library."""
    with path.open("rb") as f:
        dynamic = Dynamic.read(f)
        if dynamic is not None:
            return (dynamic.strings(Dynamic.DT_NEEDED),
                    dynamic.strings(Dynamic.DT_RPATH, Dynamic.DT_RUNPATH))
        f.seek(0)
        needed, paths = [], []
        for section in ELFFile(f).iter_sections():
            if isinstance(section, DynamicSection):
                for tag in section.iter_tags():
                    if tag.entry.d_tag == "DT_NEEDED":
                        needed.append(tag.needed)
                    elif tag.entry.d_tag in ("DT_RPATH", "DT_RUNPATH"):
                        paths.append(getattr(tag, "rpath", None) or getattr(tag, "runpath", ""))
    return needed, paths


def _find_lib(name: str, dirs: list[Path]) -> Path | None:
    for d in dirs:
        if (d / name).is_file():
            return (d / name).resolve()
    return None


def loaded_libraries(so: Path, search: list[Path]) -> list[Path]:
    """The libraries the loader would load for `so` (its DT_NEEDED, transitively) that exist
    here; `search` comes first (torch's and the toolkit's library dirs)."""
    system = _system_dirs()
    seen: dict[str, Path] = {}
    queue = [(so, n) for n in elf_dynamic(so)[0]]
    while queue and len(seen) < 200:
        parent, name = queue.pop(0)
        if name in seen:
            continue
        runpaths = [d for p in elf_dynamic(parent)[1] for d in p.split(":")]
        origin = str(parent.resolve().parent)
        dirs = [*search, *(Path(p.replace("$ORIGIN", origin)) for p in runpaths if p), *system]
        extra = _compiler_lib(name) if name.startswith(("libstdc++", "libgcc_s")) else None
        found = _find_lib(name, ([extra] if extra else []) + dirs)
        if found is None:
            continue
        seen[name] = found
        queue += [(found, n) for n in elf_dynamic(found)[0]]
    return list(seen.values())


def _defines(lib: Path, names: set[str]) -> set[str]:
    with lib.open("rb") as f:
        dynamic = Dynamic.read(f)
        if dynamic is not None:
            return dynamic.defines(names)
        f.seek(0)
        elf = ELFFile(f)
        table = elf.get_section_by_name(".gnu.hash") or elf.get_section_by_name(".hash")
        found = set()
        if isinstance(table, (GNUHashSection, ELFHashSection)):
            for name in names:
                sym = table.get_symbol(name)
                if sym is not None and sym["st_shndx"] != "SHN_UNDEF":
                    found.add(name)
            return found
        dynsym = elf.get_section_by_name(".dynsym")
        for sym in dynsym.iter_symbols() if dynsym else ():
            if sym.name in names and sym["st_shndx"] != "SHN_UNDEF":
                found.add(sym.name)
        return found


def unresolved_symbols(so: Path, search: list[Path]) -> list[str]:
    """Strong undefined symbols of `so` that none of the libraries it loads defines."""
    missing = {n for n in undefined_symbols(so) if not PYTHON_API.match(n)}
    for lib in loaded_libraries(so, search):
        if not missing:
            break
        missing -= _defines(lib, missing)
    return sorted(missing)


def demangle(names: list[str]) -> dict[str, str]:
    """C++ names as source spelling (c++filt from binutils; names unchanged without it)."""
    tool = shutil.which("c++filt")
    if not names or tool is None:
        return {n: n for n in names}
    proc = capture([tool], input="\n".join(names) + "\n")
    out = proc.stdout.splitlines()
    if proc.returncode != 0 or len(out) != len(names):
        return {n: n for n in names}
    return dict(zip(names, out))


# torch's C++ API (c10::, at::, torch:: but not torch::stable::), by its mangled prefix.
_NON_STABLE = re.compile(r"^_ZN[KVRO]*(?:3c10|2at|5torch(?!6stable))")


def non_stable_symbols(so: Path) -> list[str]:
    """Undefined symbols of `so` from torch's C++ API, which a stable-ABI build must not use."""
    return sorted(n for n in undefined_symbols(so, weak=True) if _NON_STABLE.match(n))


# --- what it was built as ----------------------------------------------------------------------

BUILT_AS = ".kbuild.variant"  # resources/templates/extension.cpp writes the variant's name there


def built_as(so: Path) -> str | None:
    """The variant name this builder compiled `so` as, or None (built elsewhere, or unreadable)."""
    try:
        with so.open("rb") as f:
            section = ELFFile(f).get_section_by_name(BUILT_AS)
            data = section.data() if section is not None else None
    except Exception:  # not an ELF file: the ABI check says so
        return None
    return data.split(b"\0", 1)[0].decode("ascii", "replace") if data else None


# --- CUDA fat binaries -----------------------------------------------------------------------

FATBIN_MAGIC = 0xBA55ED50
KIND_PTX, KIND_SASS = 1, 2
FLAG_ARCH_SPECIFIC, FLAG_FAMILY = 0x100000, 0x200000


@dataclass(frozen=True, order=True)
class CudaCode:
    """One entry of a fat binary: SASS (`sm_90a`) or PTX (`compute_120`)."""

    major: int
    minor: int
    suffix: str  # "", "a" (arch-specific) or "f" (family)
    ptx: bool

    @property
    def name(self) -> str:
        return f"{'compute' if self.ptx else 'sm'}_{self.major}{self.minor}{self.suffix}"


def parse_fatbin(data: bytes) -> list[CudaCode]:
    """Entries of a `.nv_fatbin` section: one fat binary per translation unit, each a header
    (magic, version, header size, size) followed by entries (kind, header size, payload size,
    …, arch at byte 28, flags at byte 40)."""
    codes: list[CudaCode] = []
    off = 0
    while off + 16 <= len(data):
        magic, _, hsize, size = struct.unpack_from("<IHHQ", data, off)
        if magic != FATBIN_MAGIC:
            off += 8  # sections are 8-aligned; skip padding
            continue
        pos, end = off + hsize, min(off + hsize + size, len(data))
        while pos + 44 <= end:
            kind, _, ehsize, payload = struct.unpack_from("<HHIQ", data, pos)
            arch, = struct.unpack_from("<I", data, pos + 28)
            flags, = struct.unpack_from("<I", data, pos + 40)
            if kind in (KIND_PTX, KIND_SASS) and arch:
                suffix = "a" if flags & FLAG_ARCH_SPECIFIC else "f" if flags & FLAG_FAMILY else ""
                codes.append(CudaCode(arch // 10, arch % 10, suffix, kind == KIND_PTX))
            if ehsize == 0:
                break
            pos += ehsize + payload
        off = (end + 7) & ~7
    return sorted(set(codes))


def cuda_code(so: Path) -> list[CudaCode]:
    with so.open("rb") as f:
        section = ELFFile(f).get_section_by_name(".nv_fatbin")
        return parse_fatbin(section.data()) if section is not None else []


_CAP = re.compile(r"^(\d+)\.(\d+)([af]?)(\+PTX)?$")


def _runs_on(code: CudaCode, major: int, minor: int, suffix: str) -> bool:
    """Whether `code` runs on (or JIT-compiles for) a device of capability major.minor that
    needs `suffix` features."""
    exact = (code.major, code.minor) == (major, minor)
    if suffix == "a":
        return exact and code.suffix == "a"
    if code.suffix == "a":
        return exact and not suffix
    same_family = code.major == major and code.minor <= minor
    if suffix == "f":
        return same_family and code.suffix == "f"
    if code.ptx and code.suffix == "":
        return (code.major, code.minor) <= (major, minor)
    return same_family


def cuda_coverage_problems(codes: list[CudaCode], capabilities: list[str]) -> list[str]:
    """Declared capabilities (metadata's `backend.archs`) the fat binary cannot run on."""
    problems = []
    for cap in capabilities:
        m = _CAP.match(cap)
        if not m:
            problems.append(f"capability {cap!r} is not a CUDA capability")
            continue
        major, minor, suffix, ptx = int(m[1]), int(m[2]), m[3], bool(m[4])
        if not any(_runs_on(c, major, minor, suffix) for c in codes):
            problems.append(f"no code for capability {cap}")
        elif ptx and not any(c.ptx and (c.major, c.minor, c.suffix) == (major, minor, suffix)
                             for c in codes):
            problems.append(f"no PTX for capability {cap}")
    return problems


# --- HIP offload bundles ---------------------------------------------------------------------

BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
COMPRESSED_MAGIC = b"CCOB"


def parse_offload_bundles(data: bytes) -> tuple[list[str], bool]:
    """(target ids, whether compressed bundles were skipped) of a `.hip_fatbin` section."""
    targets: list[str] = []
    start = data.find(BUNDLE_MAGIC)
    while start != -1:
        pos = start + len(BUNDLE_MAGIC)
        if pos + 8 <= len(data):
            count, = struct.unpack_from("<Q", data, pos)
            pos += 8
            for _ in range(min(count, 4096)):
                if pos + 24 > len(data):
                    break
                _, _, idlen = struct.unpack_from("<QQQ", data, pos)
                pos += 24
                targets.append(data[pos:pos + idlen].decode("ascii", "replace"))
                pos += idlen
        start = data.find(BUNDLE_MAGIC, pos)
    return targets, COMPRESSED_MAGIC in data


def rocm_targets(so: Path) -> tuple[list[str], bool]:
    with so.open("rb") as f:
        section = ELFFile(f).get_section_by_name(".hip_fatbin")
        return parse_offload_bundles(section.data()) if section is not None else ([], False)


def rocm_coverage_problems(targets: list[str], archs: list[str]) -> list[str]:
    """Declared gfx archs with no code object (`hipv4-amdgcn-amd-amdhsa--gfx90a[:features]`)."""
    have = {t.split("--")[-1].split(":")[0] for t in targets if "amdgcn" in t}
    return [f"no code object for {a}" for a in archs if a.split(":")[0] not in have]
