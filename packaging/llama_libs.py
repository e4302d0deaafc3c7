"""Which of llama-cpp-python's shared libraries a Hearth bundle needs, and how to avoid shipping copies.

A wheel cannot hold symlinks, so llama-cpp-python's wheel carries every library three times
(`libllama.so`, `libllama.so.0`, `libllama.so.0.5.0`) plus a fourth set under the top-level `lib/`. For a
CPU build that costs ~20 MB; for a CUDA build, where `libggml-cuda.so` alone is ~60 MB per GPU
architecture, it is what makes the wheel 268 MB. Only two kinds of names are ever opened at run time: the
unversioned names that llama_cpp's Python code loads with ctypes (`libllama.so`, `libggml.so`, …) and the
SONAMEs those libraries list as DT_NEEDED (`libggml-base.so.0`, …). Everything else is a copy.

    python packaging/llama_libs.py list LIB_DIR        # the runtime libraries, one per line
    python packaging/llama_libs.py needs LIB_DIR       # what they need from elsewhere (libcudart.so.13, …)
    python packaging/llama_libs.py symlink DIR         # replace identical copies in DIR by relative symlinks
    python packaging/llama_libs.py dedupe-wheel WHEEL  # rewrite a wheel keeping one copy of each library

Used by packaging/hearth.spec, packaging/build_linux.sh and packaging/build_llama_cuda.sh. Standard library
only: it runs inside PyInstaller and on a GPU machine with nothing else installed.
"""

from __future__ import annotations

import base64
import hashlib
import struct
import sys
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path

# The libraries llama_cpp's modules open by base name (llama_cpp.py, _ggml.py, mtmd_cpp.py). llava is
# listed for older releases; a name that is not there is skipped.
PYTHON_LOADED = ("llama", "ggml", "mtmd", "llava")

_DT_NEEDED = 1
_DT_SONAME = 14
_SHT_DYNAMIC = 6


def elf_dynamic(path: Path) -> tuple[str | None, list[str]]:
    """(SONAME, DT_NEEDED entries) of a 64-bit little-endian ELF file; (None, []) for anything else."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None, []
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    for sh_type, sh_offset, sh_size, sh_link in ((s[1], s[4], s[5], s[6]) for s in sections):
        if sh_type != _SHT_DYNAMIC:
            continue
        strtab_offset = sections[sh_link][4]

        def string(offset: int, base: int = strtab_offset) -> str:
            end = data.index(b"\0", base + offset)
            return data[base + offset : end].decode("utf-8", "replace")

        soname: str | None = None
        needed: list[str] = []
        for entry in range(sh_offset, sh_offset + sh_size, 16):
            tag, value = struct.unpack_from("<qQ", data, entry)
            if tag == 0:
                break
            if tag == _DT_NEEDED:
                needed.append(string(value))
            elif tag == _DT_SONAME:
                soname = string(value)
        return soname, needed
    return None, []


def runtime_libraries(lib_dir: Path) -> tuple[list[Path], set[str]]:
    """The files in `lib_dir` a running Hearth can open, and the libraries they need from elsewhere.

    On Linux: the libraries llama_cpp loads by name plus the closure of their DT_NEEDED entries that lie
    in `lib_dir`. Elsewhere (Windows DLLs and macOS dylibs carry no version copies): every library file.
    """
    lib_dir = Path(lib_dir)
    if not any(lib_dir.glob("*.so*")):
        suffixes = (".dll", ".dylib", ".so")
        return sorted(p for p in lib_dir.iterdir() if p.is_file() and p.name.endswith(suffixes)), set()
    wanted = [f"lib{name}.so" for name in PYTHON_LOADED if (lib_dir / f"lib{name}.so").is_file()]
    # A build with GGML_BACKEND_DL=ON links no backend: ggml dlopens each libggml-<backend>.so in the folder.
    ggml = lib_dir / "libggml.so"
    if ggml.is_file() and not any(n.startswith("libggml-cpu") for n in elf_dynamic(ggml)[1]):
        wanted += sorted(p.name for p in lib_dir.glob("libggml-*.so") if p.name != "libggml-base.so")
    keep: dict[str, Path] = {}
    external: set[str] = set()
    while wanted:
        name = wanted.pop()
        if name in keep:
            continue
        path = lib_dir / name
        if not path.is_file():
            external.add(name)
            continue
        keep[name] = path
        wanted.extend(elf_dynamic(path)[1])
    return sorted(keep.values()), external


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def symlink_copies(directory: Path) -> int:
    """Replace files in `directory` that are byte-identical to another by a relative symlink.

    The longest name (the real `libx.so.0.5.0`-style one, else the SONAME) stays a file, as a distro would
    lay it out. Returns the bytes saved.
    """
    groups: dict[tuple[int, str], list[Path]] = {}
    for path in sorted(Path(directory).iterdir()):
        if path.is_file() and not path.is_symlink():
            groups.setdefault((path.stat().st_size, _digest(path)), []).append(path)
    saved = 0
    for (size, _), paths in groups.items():
        if len(paths) < 2:
            continue
        target = max(paths, key=lambda p: (len(p.name), p.name))
        for path in paths:
            if path != target:
                path.unlink()
                path.symlink_to(target.name)
                saved += size
    return saved


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def dedupe_wheel(wheel: Path) -> tuple[int, int]:
    """Rewrite a llama-cpp-python wheel in place with one copy of each runtime library.

    Drops the top-level `lib/`, `include/` and `bin/` trees (headers, CMake files and a second set of the
    libraries, for C++ consumers; Python never reads them) and, in `llama_cpp/lib`, every file that is not
    a runtime library by `runtime_libraries`. RECORD is rewritten to match. Returns (old size, new size).
    """
    wheel = Path(wheel)
    before = wheel.stat().st_size
    with zipfile.ZipFile(wheel) as zin, tempfile.TemporaryDirectory() as tmp:
        names = zin.namelist()
        lib_prefix = "llama_cpp/lib/"
        lib_members = [n for n in names if n.startswith(lib_prefix) and not n.endswith("/")]
        libs = Path(tmp)
        for member in lib_members:
            if "/" not in member[len(lib_prefix) :]:
                (libs / member[len(lib_prefix) :]).write_bytes(zin.read(member))
        keep_libs = {lib_prefix + p.name for p in runtime_libraries(libs)[0]}

        def wanted(name: str) -> bool:
            top = name.split("/", 1)[0]
            if top in ("lib", "include", "bin") or ".data/data/" in name or ".data/scripts/" in name:
                return False
            return not name.startswith(lib_prefix) or name in keep_libs

        record_name = next(n for n in names if n.endswith(".dist-info/RECORD"))
        out = wheel.with_suffix(".tmp")
        records: list[str] = []
        with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as zout:
            for info in zin.infolist():
                if info.filename == record_name or info.filename.endswith("/"):
                    continue
                if not wanted(info.filename):
                    continue
                data = zin.read(info)
                zout.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
                records.append(f"{info.filename},{_record_hash(data)},{len(data)}")
            records.append(f"{record_name},,")
            zout.writestr(record_name, "\n".join(records) + "\n")
    out.replace(wheel)
    return before, wheel.stat().st_size


def _print_lines(lines: Iterable[str]) -> None:
    for line in lines:
        print(line)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("list", "needs", "symlink", "dedupe-wheel"):
        print(__doc__, file=sys.stderr)
        return 2
    action, target = argv[0], Path(argv[1])
    if action == "list":
        _print_lines(str(p) for p in runtime_libraries(target)[0])
    elif action == "needs":
        _print_lines(sorted(runtime_libraries(target)[1]))
    elif action == "symlink":
        print(f"{symlink_copies(target) / 1e6:.1f} MB of copies replaced by symlinks in {target}")
    else:
        before, after = dedupe_wheel(target)
        print(f"{target.name}: {before / 1e6:.1f} MB -> {after / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
