"""Checks a frozen Linux bundle before it is packaged, so a missing library fails the build, not a user.

    python packaging/linux_bundle.py check BUNDLE_DIR [--allow-missing NAME ...] [--declared DEPENDS]

Runs `ldd` on every ELF file in the bundle (with the bundle's own folder on the library path, as
PyInstaller's bootloader sets it) and:
- fails when a library resolves nowhere, except the names allowed to be missing (libcuda.so.1: the
  NVIDIA driver, which a machine without a GPU does not have and the app then runs on the CPU);
- prints the Debian packages that provide the system libraries it resolved to (with `dpkg -S`), and warns
  about any that the control file's Depends (`--declared`) does not name;
- prints the newest glibc symbol version the bundle needs, as the last line: `libc6 (>= 2.34)`.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

_GLIBC = re.compile(rb"GLIBC_(2\.\d+(?:\.\d+)?)\x00")
_LDD_LINE = re.compile(r"^\s*(\S+)\s+=>\s+(not found|\S+)")
# The dynamic loader is listed by path alone: "/lib64/ld-linux-x86-64.so.2 (0x…)".
_LDD_LOADER = re.compile(r"^\s*(/\S+)\s+\(0x")


def elf_files(bundle: Path) -> list[Path]:
    found = []
    for path in sorted(bundle.rglob("*")):
        if path.is_file() and not path.is_symlink():
            with path.open("rb") as fh:
                if fh.read(4) == b"\x7fELF":
                    found.append(path)
    return found


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


# Taken from the system, never bundled (packaging/hearth.spec excludes them), and named in the .deb's
# Depends: the desktop's graphics, input and font stack, as for PySide6 from PyPI (copies from the build
# machine break on newer distributions), and the C++ runtime, which every Debian/Ubuntu system has and
# which must not be older than what the system's own GL or input-method libraries load into the process.
# A headless build machine may lack some of them (the xcb and Wayland helpers): they cannot be checked there.
SYSTEM_LIBS = re.compile(
    # Not the copies wheels vendor under a hash (auditwheel: pillow.libs/libxcb-9065bb12.so.1.1.0), which
    # only their own package loads and the system's would not replace.
    r"(?!.*-[0-9a-f]{8}\.so)"
    r"lib(X11|X11-xcb|Xau|Xdmcp|Xext|xcb(-[\w-]+)?|xkbcommon(-x11)?|fontconfig|freetype|glib-2\.0|"
    r"gthread-2\.0|gobject-2\.0|gio-2\.0|gmodule-2\.0|dbus-1|wayland-\w+|EGL|GL|GLX|GLdispatch|OpenGL|"
    r"stdc\+\+|gcc_s)\.so(\.\d+)*$"
)


def _needed(elf: Path) -> list[str]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from llama_libs import elf_dynamic

    return elf_dynamic(elf)[1]


def check(bundle: Path, allow_missing: set[str], declared: str | None) -> int:
    bundle = bundle.resolve()
    internal = bundle / "_internal"
    env = dict(os.environ, LD_LIBRARY_PATH=str(internal if internal.is_dir() else bundle))
    resolved: dict[str, str] = {}
    needed: dict[str, list[str]] = {}
    glibc = "2.17"
    for elf in elf_files(bundle):
        for match in _GLIBC.finditer(elf.read_bytes()):
            glibc = max(glibc, match.group(1).decode(), key=_version_key)
        for name in _needed(elf):
            needed.setdefault(name, []).append(str(elf.relative_to(bundle)))
        result = subprocess.run(["ldd", str(elf)], capture_output=True, text=True, env=env, check=False)
        for line in result.stdout.splitlines():
            parsed = _LDD_LINE.match(line)
            if parsed and resolved.get(parsed.group(1), "not found") == "not found":
                resolved[parsed.group(1)] = parsed.group(2)
            elif loader := _LDD_LOADER.match(line):
                resolved[Path(loader.group(1)).name] = loader.group(1)

    # Only direct dependencies count, as for dpkg-shlibdeps: a system library's own dependencies are its
    # package's business.
    system: set[str] = set()
    failed = False
    for name, users in sorted(needed.items()):
        where = resolved.get(name, "not found")
        if where == "not found":
            if name in allow_missing:
                continue
            if SYSTEM_LIBS.match(name):
                print(f"note: {name} is not installed here, so its users cannot be checked", file=sys.stderr)
                continue
            print(f"error: {name} not found (needed by {', '.join(users[:3])})", file=sys.stderr)
            failed = True
        elif not Path(where).resolve().is_relative_to(bundle):
            system.add(str(Path(where).resolve()))

    packages: set[str] = set()
    if system and _have("dpkg"):
        result = subprocess.run(["dpkg", "-S", *sorted(system)], capture_output=True, text=True, check=False)
        for line in result.stdout.splitlines():
            packages.update(p.strip().split(":")[0] for p in line.split(": ", 1)[0].split(","))
    print("system packages used: " + (", ".join(sorted(packages)) or "(dpkg not available)"))
    if declared is not None and packages:
        named = set(re.findall(r"[a-z0-9][a-z0-9+.-]+", re.sub(r"\([^)]*\)", "", declared)))
        # The C library and the compiler runtime are always there; the rest must be declared.
        undeclared = sorted(packages - named - {"libc6", "libgcc-s1", "libstdc++6"})
        if undeclared:
            print(f"warning: not in Depends: {', '.join(undeclared)}", file=sys.stderr)
    print(f"libc6 (>= {glibc})")
    return 1 if failed else 0


def _have(command: str) -> bool:
    return any((Path(d) / command).is_file() for d in os.environ.get("PATH", "").split(os.pathsep) if d)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    check_parser = sub.add_parser("check")
    check_parser.add_argument("bundle", type=Path)
    check_parser.add_argument("--allow-missing", nargs="*", default=[])
    check_parser.add_argument("--declared", help="the Depends line of the control file")
    args = parser.parse_args(argv)
    return check(args.bundle, set(args.allow_missing), args.declared)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
