"""packaging/llama_libs.py on real ELF files: which libraries a bundle keeps, and the deduplicated wheel.

The libraries are tiny stand-ins built with gcc, linked the way llama.cpp's are (a CUDA build's
libggml.so needs libggml-cuda.so.0, which needs libcudart.so.13), and copied three times each the way
llama-cpp-python's wheel carries them.
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "packaging"))
import llama_libs

pytestmark = pytest.mark.skipif(
    shutil.which("gcc") is None or not sys.platform.startswith("linux"), reason="needs gcc on Linux"
)


def _so(path: Path, soname: str, needs: list[Path]) -> None:
    source = path.parent / "empty.c"
    source.write_text("int hearth_stub;\n")
    links = [arg for lib in needs for arg in ("-L", str(lib.parent), f"-l:{lib.name}")]
    flags = ["-shared", "-fPIC", f"-Wl,-soname,{soname}", "-Wl,--no-as-needed"]
    subprocess.run(["gcc", *flags, "-o", str(path), str(source), *links], check=True)


def _wheel_lib_dir(tmp_path: Path) -> Path:
    """llama_cpp/lib of a CUDA wheel: every library as libX.so, libX.so.0 and libX.so.0.9.1."""
    cuda = tmp_path / "cuda"
    cuda.mkdir()
    _so(cuda / "libcudart.so.13", "libcudart.so.13", [])
    lib = tmp_path / "lib"
    lib.mkdir()
    _so(lib / "libggml-base.so.0", "libggml-base.so.0", [])
    _so(lib / "libggml-cpu.so.0", "libggml-cpu.so.0", [lib / "libggml-base.so.0"])
    _so(lib / "libggml-cuda.so.0", "libggml-cuda.so.0", [lib / "libggml-base.so.0", cuda / "libcudart.so.13"])
    _so(
        lib / "libggml.so.0",
        "libggml.so.0",
        [lib / "libggml-base.so.0", lib / "libggml-cpu.so.0", lib / "libggml-cuda.so.0"],
    )
    _so(lib / "libllama.so.0", "libllama.so.0", [lib / "libggml.so.0", lib / "libggml-base.so.0"])
    _so(lib / "libllama-common.so.0", "libllama-common.so.0", [lib / "libllama.so.0"])
    (lib / "empty.c").unlink()
    for so in list(lib.iterdir()):
        shutil.copy(so, lib / so.name[: -len(".0")])
        shutil.copy(so, lib / f"{so.name}.9.1")
    return lib


def test_elf_dynamic_reads_soname_and_needed(tmp_path: Path) -> None:
    lib = _wheel_lib_dir(tmp_path)
    soname, needed = llama_libs.elf_dynamic(lib / "libggml.so")
    assert soname == "libggml.so.0"
    assert {"libggml-base.so.0", "libggml-cpu.so.0", "libggml-cuda.so.0"} <= set(needed)
    assert llama_libs.elf_dynamic(lib.parent / "cuda" / "empty.c") == (None, [])


def test_runtime_libraries_keep_what_is_opened_and_nothing_else(tmp_path: Path) -> None:
    lib = _wheel_lib_dir(tmp_path)
    keep, external = llama_libs.runtime_libraries(lib)
    assert [p.name for p in keep] == [
        "libggml-base.so.0",
        "libggml-cpu.so.0",
        "libggml-cuda.so.0",
        "libggml.so",
        "libggml.so.0",
        "libllama.so",
    ]
    # The CUDA runtime must come from elsewhere (build_linux.sh bundles it); the C library is the system's.
    assert "libcudart.so.13" in external
    assert "libc.so.6" in external


def test_symlink_copies_leaves_one_file_per_library(tmp_path: Path) -> None:
    lib = _wheel_lib_dir(tmp_path)
    saved = llama_libs.symlink_copies(lib)
    assert saved > 0
    assert not (lib / "libllama.so.0.9.1").is_symlink()
    assert (lib / "libllama.so").readlink() == Path("libllama.so.0.9.1")
    assert (lib / "libllama.so.0").readlink() == Path("libllama.so.0.9.1")
    assert llama_libs.elf_dynamic(lib / "libllama.so")[0] == "libllama.so.0"


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def test_dedupe_wheel_keeps_one_copy_and_a_valid_record(tmp_path: Path) -> None:
    lib = _wheel_lib_dir(tmp_path)
    wheel = tmp_path / "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl"
    members: dict[str, bytes] = {
        "llama_cpp/__init__.py": b"from .llama_cpp import *\n",
        "llama_cpp_python-0.3.36.dist-info/METADATA": b"Name: llama_cpp_python\nVersion: 0.3.36\n",
        "include/llama.h": b"/* header */\n",
    }
    for so in sorted(lib.iterdir()):
        members[f"llama_cpp/lib/{so.name}"] = so.read_bytes()
        members[f"lib/{so.name}"] = so.read_bytes()
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in members.items())
    with zipfile.ZipFile(wheel, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
        record_name = "llama_cpp_python-0.3.36.dist-info/RECORD"
        z.writestr(record_name, f"{record}{record_name},,\n")

    before, after = llama_libs.dedupe_wheel(wheel)

    assert after < before
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        assert sorted(n for n in names if n.startswith("llama_cpp/lib/")) == [
            "llama_cpp/lib/libggml-base.so.0",
            "llama_cpp/lib/libggml-cpu.so.0",
            "llama_cpp/lib/libggml-cuda.so.0",
            "llama_cpp/lib/libggml.so",
            "llama_cpp/lib/libggml.so.0",
            "llama_cpp/lib/libllama.so",
        ]
        assert not any(n.startswith(("lib/", "include/")) for n in names)
        assert "llama_cpp/__init__.py" in names
        rows = z.read("llama_cpp_python-0.3.36.dist-info/RECORD").decode().splitlines()
        listed = {row.rsplit(",", 2)[0] for row in rows}
        assert listed == names
        for row in rows:
            name, digest, size = row.rsplit(",", 2)
            if digest:
                data = z.read(name)
                assert (digest, int(size)) == (_record_hash(data), len(data))
