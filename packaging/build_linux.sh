#!/usr/bin/env bash
# Build Hearth's Linux installers from the venv: the PyInstaller onedir bundle, a .deb and a portable
# .tar.gz, all in dist/.
#
#   packaging/build_linux.sh
#
#   dist/hearth/                                 the bundle (run dist/hearth/hearth)
#   dist/hearth_<version>_amd64.deb              installs to /opt/hearth, /usr/bin/hearth, a desktop entry
#   dist/Hearth-<version>-linux-x86_64.tar.gz    the same bundle, portable
#
# llama.cpp's Python code is frozen from the venv, its shared libraries come from the wheel of the same
# flavour in the wheel cache (packaging/llama_build.py), the one scripts/bootstrap.sh installs: ggml's CPU
# backend once per x86-64 CPU variant, the best chosen on the user's machine at run time.
#
# Environment:
#   HEARTH_BACKEND=cpu|cuda      cpu (default): the CPU wheel, built if the cache lacks it (~25 min on 2
#                                cores). cuda: a CUDA wheel from packaging/build_llama_cuda.sh with the CUDA
#                                runtime and cuBLAS next to it; package hearth-cuda, files named …-cuda
#                                (see packaging/README.md)
#   HEARTH_LLAMA_WHEEL=FILE      the llama-cpp-python wheel whose libraries are bundled (default: the one
#                                above for the backend)
#   HEARTH_CUDA_RUNTIME_DIR=DIR  where libcudart/libcublas/libcublasLt come from (default: PyPI's
#                                nvidia-cuda-runtime and nvidia-cublas wheels for the wheel's CUDA major)
#   HEARTH_BUNDLE_STARTER=1|0    bundle the starter model (default 1)
#   HEARTH_DEB_COMPRESSION=zstd|xz|gzip|none   (default zstd: 3 s here against xz's 78 s, for 7% more;
#                                every dpkg on a system that can run the bundle (glibc >= 2.35) reads it)
#   HEARTH_VENV=DIR              the venv to freeze (default .venv, as scripts/bootstrap.sh makes it)
# shellcheck disable=SC2012 # ls picks wheels by mtime; their names are [A-Za-z0-9._+-] only
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
venv="${HEARTH_VENV:-$root/.venv}"
py="$venv/bin/python"
backend="${HEARTH_BACKEND:-cpu}"
compression="${HEARTH_DEB_COMPRESSION:-zstd}"
case "$backend" in
  cpu) pkg=hearth suffix="" ;;
  cuda) pkg=hearth-cuda suffix="-cuda" ;;
  *) echo "HEARTH_BACKEND must be cpu or cuda, not '$backend'" >&2; exit 2 ;;
esac
[ -x "$py" ] || { echo "no venv at $venv: run scripts/bootstrap.sh test first" >&2; exit 1; }
for tool in dpkg-deb ldd tar gzip; do
  command -v "$tool" >/dev/null || { echo "$tool is needed to build the Linux packages" >&2; exit 1; }
done

version="$("$py" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')"
arch="$(dpkg --print-architecture)"
machine="$(uname -m)"
dist="$root/dist"
build="$root/build/linux-$backend"
# Same sources, same archive bytes: dpkg-deb and tar take their timestamps from here.
SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct 2>/dev/null || date +%s)}"
export SOURCE_DATE_EPOCH
mkdir -p "$dist" "$build"
started=$SECONDS

# The spec patches two PyInstaller internals to keep unused Qt plugins and the desktop stack out before
# dependency analysis; they are stable across 6.x, so the major version is pinned.
if ! "$py" -c 'import sys, PyInstaller; sys.exit(PyInstaller.__version__.split(".")[0] != "6")' 2>/dev/null; then
  "$py" -m pip install --quiet --disable-pip-version-check "pyinstaller>=6.10,<7"
fi

llama_version="$("$py" packaging/llama_build.py version)"
wheel_cache="${XDG_CACHE_HOME:-$HOME/.cache}/hearth/wheels"
wheel="${HEARTH_LLAMA_WHEEL:-}"
if [ -z "$wheel" ]; then
  flavour_dir="$wheel_cache/$("$py" packaging/llama_build.py flavour "$backend")"
  wheel="$(ls "$flavour_dir"/llama_cpp_python-"$llama_version"-*.whl 2>/dev/null | head -n1 || true)"
  if [ -z "$wheel" ] && [ "$backend" = cpu ]; then
    echo "Building llama-cpp-python $llama_version with every CPU variant (once; ~25 min on 2 cores)…"
    "$py" packaging/llama_build.py wheel cpu "$flavour_dir"
    wheel="$(ls "$flavour_dir"/llama_cpp_python-"$llama_version"-*.whl | head -n1)"
  fi
fi
[ -f "$wheel" ] || {
  echo "no $backend wheel of llama-cpp-python $llama_version in ${flavour_dir:-the cache}: build one with" \
    "packaging/build_llama_cuda.sh or set HEARTH_LLAMA_WHEEL" >&2
  exit 1
}
libs="$build/llama-lib"
rm -rf "$libs" && mkdir -p "$libs"
# Only the shared libraries are taken from the wheel: llama_cpp's Python code is the same for every build
# of one version, and the venv's copy is what gets frozen, so the versions must match.
"$py" - "$wheel" "$libs" <<'PY'
import importlib.metadata
import sys
import zipfile
from pathlib import Path

wheel, out = sys.argv[1], Path(sys.argv[2])
with zipfile.ZipFile(wheel) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    version = next(line.split(":", 1)[1].strip() for line in z.read(meta).decode().splitlines()
                   if line.startswith("Version:"))
    installed = importlib.metadata.version("llama-cpp-python")
    if version != installed:
        sys.exit(f"{wheel} is llama-cpp-python {version}, the venv has {installed}")
    for name in z.namelist():
        parts = name.split("/")
        if len(parts) == 3 and parts[:2] == ["llama_cpp", "lib"] and parts[2]:
            (out / parts[2]).write_bytes(z.read(name))
PY
echo "llama.cpp libraries from $wheel"
if [ "$backend" = cpu ] && ls "$libs"/libggml-cuda.so* >/dev/null 2>&1; then
  echo "$wheel is a CUDA build: use HEARTH_BACKEND=cuda" >&2
  exit 1
fi
if [ "$backend" = cuda ]; then
  ls "$libs"/libggml-cuda.so* >/dev/null 2>&1 || { echo "$wheel is not a CUDA build of llama.cpp" >&2; exit 1; }
  major="$("$py" packaging/llama_libs.py needs "$libs" | sed -n 's/^libcudart\.so\.\([0-9]*\)$/\1/p')"
  [ -n "$major" ] || { echo "cannot tell which CUDA runtime $wheel needs" >&2; exit 1; }
  if [ -n "${HEARTH_CUDA_RUNTIME_DIR:-}" ]; then
    sources=("$HEARTH_CUDA_RUNTIME_DIR")
  else
    # The versions the wheel was linked against when build_llama_cuda.sh recorded them, else the newest.
    pins="$(dirname "$wheel")/cuda-runtime.txt"
    requirements=("nvidia-cuda-runtime==$major.*" "nvidia-cublas==$major.*")
    [ -f "$pins" ] && requirements=(-r "$pins")
    "$py" -m pip install --quiet --disable-pip-version-check --target "$build/cuda-wheels" --upgrade \
      "${requirements[@]}"
    sources=("$build"/cuda-wheels/nvidia/*/lib)
  fi
  # libggml-cuda needs libcudart and libcublas, libcublas needs libcublasLt: copy until nothing new is
  # needed. libcuda.so.1 is the driver's and is never bundled; without it the app runs on the CPU.
  for _ in 1 2 3 4; do
    copied=0
    for name in $("$py" packaging/llama_libs.py needs "$libs"); do
      for dir in "${sources[@]}"; do
        if [ -e "$dir/$name" ]; then
          cp -L "$dir/$name" "$libs/$name"
          copied=1
          break
        fi
      done
    done
    [ "$copied" = 1 ] || break
  done
  for lib in cudart cublas cublasLt; do
    [ -e "$libs/lib$lib.so.$major" ] || { echo "lib$lib.so.$major not found in ${sources[*]}" >&2; exit 1; }
  done
fi
# Never ship a single-variant (or -march=native) CPU backend, nor AMX code with an unfilled tile config.
"$py" packaging/llama_build.py check "$libs"
export HEARTH_LLAMA_LIB_DIR="$libs"

echo "Freezing Hearth $version ($backend) with PyInstaller…"
"$py" -m PyInstaller --noconfirm --log-level WARN \
  --distpath "$build/pyinstaller-dist" --workpath "$build/pyinstaller-work" packaging/hearth.spec
bundle="$dist/$pkg"
rm -rf "$bundle"
mv "$build/pyinstaller-dist/hearth" "$bundle"

# The wheel's copies of one library become symlinks (tar and dpkg keep them).
"$py" packaging/llama_libs.py symlink "$bundle/_internal/llama_cpp/lib"
# CPython's own libraries come unstripped from pyenv/python.org builds (libpython: 23 MB → 5 MB). Wheels'
# libraries are left alone: some were rewritten by patchelf, and strip can corrupt those.
if command -v strip >/dev/null; then
  strip --strip-unneeded "$bundle"/_internal/libpython3*.so* "$bundle"/_internal/python3*/lib-dynload/*.so
fi

# What Qt's xcb and Wayland plugins, Qt itself and the C++ runtime need from the system
# (packaging/linux_bundle.py SYSTEM_LIBS; checked below against what the bundle links to).
depends="libstdc++6, libgcc-s1, libgl1, libegl1, libfontconfig1, libfreetype6, \
libglib2.0-0t64 | libglib2.0-0, libdbus-1-3, libx11-6, libx11-xcb1, libxkbcommon0, libxkbcommon-x11-0, \
libxcb1, libxcb-cursor0, libxcb-glx0, libxcb-icccm4, libxcb-image0, libxcb-keysyms1, libxcb-randr0, \
libxcb-render0, libxcb-render-util0, libxcb-shape0, libxcb-shm0, libxcb-sync1, libxcb-util1, \
libxcb-xfixes0, libxcb-xkb1"
# Wayland sessions use them when present; without them Qt falls back to X11 (XWayland).
recommends="libwayland-client0, libwayland-cursor0, libwayland-egl1"
check_out="$("$py" packaging/linux_bundle.py check "$bundle" --allow-missing libcuda.so.1 \
  --declared "$depends, $recommends")"
echo "$check_out" | sed '$d'
libc_dep="$(echo "$check_out" | tail -n1)"

# --- .deb ---------------------------------------------------------------------------------------------
stage="$build/deb"
rm -rf "$stage"
mkdir -p "$stage/DEBIAN" "$stage/opt" "$stage/usr/bin" "$stage/usr/share/applications" \
  "$stage/usr/share/icons/hicolor/256x256/apps" "$stage/usr/share/icons/hicolor/scalable/apps" \
  "$stage/usr/share/doc/$pkg"
cp -a "$bundle" "$stage/opt/hearth"
# Absolute: Debian policy for links between top-level directories.
ln -s /opt/hearth/hearth "$stage/usr/bin/hearth"
cp resources/icons/hearth.png "$stage/usr/share/icons/hicolor/256x256/apps/hearth.png"
cp resources/icons/hearth.svg "$stage/usr/share/icons/hicolor/scalable/apps/hearth.svg"
cat >"$stage/usr/share/applications/hearth.desktop" <<'EOF'
[Desktop Entry]
Type=Application
Name=Hearth
GenericName=Local AI Chat
Comment=Chat with language models privately, on this computer
Exec=/opt/hearth/hearth
Icon=hearth
Terminal=false
Categories=Utility;
Keywords=AI;LLM;chat;GGUF;llama;
StartupNotify=true
EOF
cat >"$stage/usr/share/doc/$pkg/copyright" <<'EOF'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: Hearth
License: Apache-2.0

Files: *
License: Apache-2.0

Files: opt/hearth/_internal/*
Comment: Bundled third-party components, each under its own license: CPython (PSF-2.0), Qt 6 and
 PySide6 (LGPL-3.0), llama.cpp and llama-cpp-python (MIT), NumPy (BSD-3-Clause), SQLAlchemy and
 Alembic (MIT), Jinja2 (BSD-3-Clause), the starter model SmolLM2-135M-Instruct (Apache-2.0).
EOF
# dpkg-deb keeps modes as they are: files 644, programs and libraries 755, no group/other write.
chmod -R u+rwX,go+rX,go-w "$stage"
installed_kib="$(du -sk --exclude=DEBIAN "$stage" | cut -f1)"
{
  echo "Package: $pkg"
  echo "Version: $version"
  echo "Architecture: $arch"
  echo "Maintainer: Hearth maintainers <hearth@users.noreply.invalid>"
  echo "Installed-Size: $installed_kib"
  echo "Depends: $libc_dep, $depends"
  echo "Recommends: $recommends"
  if [ "$backend" = cuda ]; then
    # Both install to /opt/hearth; the CUDA build runs on the CPU where there is no NVIDIA driver.
    echo "Conflicts: hearth"
    echo "Replaces: hearth"
    echo "Provides: hearth"
  fi
  echo "Section: utils"
  echo "Priority: optional"
  echo "Description: private desktop chat with local language models"
  echo " Hearth runs GGUF language models with llama.cpp on this computer (CUDA on an"
  echo " NVIDIA GPU, the CPU otherwise), streams replies into a window that never freezes"
  echo " and keeps every conversation in a local SQLite database. Nothing leaves the"
  echo " machine. Includes a small starter model (SmolLM2-135M-Instruct) so chatting"
  echo " works offline right after installation."
} >"$stage/DEBIAN/control"
deb="$dist/${pkg}_${version}_${arch}.deb"
level=()
[ "$compression" = zstd ] && level=(-z9)
dpkg-deb --root-owner-group -Z"$compression" "${level[@]}" --build "$stage" "$deb" >/dev/null

# --- portable .tar.gz -----------------------------------------------------------------------------------
tar_name="Hearth-$version-linux-$machine$suffix"
rm -rf "$build/tar" && mkdir -p "$build/tar/$tar_name"
cp -a "$bundle/." "$build/tar/$tar_name/"
cp resources/icons/hearth.png "$build/tar/$tar_name/hearth.png"
tarball="$dist/$tar_name.tar.gz"
gzip_cmd=(gzip -n -6)
command -v pigz >/dev/null && gzip_cmd=(pigz -n -6)
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" \
  -C "$build/tar" -cf - "$tar_name" | "${gzip_cmd[@]}" >"$tarball"
rm -rf "$build/tar"

mib() { echo "$(( ($1 + 524288) / 1048576 )) MiB"; }
echo "bundle     $dist/$pkg/  $(mib "$(du -sb "$bundle" | cut -f1)")"
echo "installed  $(mib $((installed_kib * 1024)))"
echo "deb        $deb  $(mib "$(stat -c %s "$deb")")"
echo "tarball    $tarball  $(mib "$(stat -c %s "$tarball")")"
echo "built in $((SECONDS - started)) s"
