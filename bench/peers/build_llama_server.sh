#!/usr/bin/env bash
# Build llama.cpp's own `llama-server` from the source Hearth's llama-cpp-python is built from, for the P12
# benchmark (bench/concurrent_streams.py) to measure beside Hearth. Not part of any build or CI.
#
#   bench/peers/build_llama_server.sh        # prints the binary's path on its last line
#
# Source: the llama.cpp vendored in the llama-cpp-python sdist of the version pyproject.toml pins, downloaded
# and patched by packaging/llama_build.py's `patched_source` (Hearth's patches, packaging/llama_patches/).
# Output: ${XDG_CACHE_HOME:-$HOME/.cache}/hearth/peers/llama-server-<version>-<hash>/, outside the checkout;
# <hash> covers the patches and this script's CMake options. A folder already there is reused.
#
# CPU kernels: never -march=native (GGML_NATIVE=OFF). Rather than compiling every CPU variant again
# (GGML_CPU_ALL_VARIANTS, a large part of the wheel's build), this build has no CPU backend of its own
# (GGML_BACKEND_DL=ON, GGML_CPU=OFF): the installed wheel's `libggml-cpu-<variant>.so` libraries, the very
# kernels Hearth runs (same patched source, same ggml options), are copied beside the binary, where ggml's
# `ggml_backend_load_all()` looks, and it loads the one that scores best for this CPU, as Hearth's runner
# does (inference/ggml_backends.py). They find this build's libggml-base.so.0, already loaded under that
# name. Only the `llama-server` target is built, with `nice` and -j2 (HEARTH_BUILD_JOBS): about 10 minutes
# on 2 cores.
#
# Environment: HEARTH_VENV (default .venv): the venv whose llama_cpp/lib holds the variants.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${HEARTH_VENV:-$root/.venv}"
py="$venv/bin/python"
jobs="${HEARTH_BUILD_JOBS:-2}"
[ -x "$py" ] || { echo "no venv python at $py: run scripts/bootstrap.sh, or set HEARTH_VENV" >&2; exit 1; }

version="$(sed -n 's/^ *"llama-cpp-python==\([0-9.]*\)".*/\1/p' "$root/pyproject.toml" | head -n1)"
[ -n "$version" ] || { echo "pyproject.toml pins no llama-cpp-python==VERSION" >&2; exit 1; }
built_for="$("$py" "$root/packaging/llama_build.py" version)"
[ "$version" = "$built_for" ] || {
  echo "pyproject.toml pins llama-cpp-python==$version but packaging/llama_build.py builds $built_for" >&2
  exit 1
}

cmake_args=(
  -DCMAKE_BUILD_TYPE=Release
  -DBUILD_SHARED_LIBS=ON
  -DGGML_NATIVE=OFF
  -DGGML_BACKEND_DL=ON
  -DGGML_CPU=OFF
  -DGGML_CUDA=OFF
  -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_EXAMPLES=OFF
  -DLLAMA_BUILD_TOOLS=ON
  -DLLAMA_BUILD_SERVER=ON
  -DLLAMA_BUILD_APP=OFF
  # No web UI: neither npm nor a download of prebuilt assets (this machine reaches no internet but PyPI).
  -DLLAMA_BUILD_UI=OFF
  -DLLAMA_USE_PREBUILT_UI=OFF
  -DLLAMA_OPENSSL=OFF
  # Everything runs from the one folder the binary is in (the build folder is deleted), with no run path
  # left pointing into it.
  -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON
  "-DCMAKE_INSTALL_RPATH=\$ORIGIN"
)

hash="$(
  {
    for patch in "$root"/packaging/llama_patches/*.patch; do
      printf '%s\0' "$(basename "$patch")"
      cat "$patch"
    done
    printf '\0%s' "${cmake_args[@]}"
  } | sha256sum | cut -c1-12
)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/hearth/peers"
target="$cache/llama-server-$version-$hash"
binary="$target/llama-server"

lib_dir="$("$py" -c 'import importlib.util, pathlib
spec = importlib.util.find_spec("llama_cpp")
print(pathlib.Path(spec.origin).parent / "lib" if spec and spec.origin else "")')"
variants=()
if [ -n "$lib_dir" ] && [ -d "$lib_dir" ]; then
  mapfile -t variants < <(find "$lib_dir" -maxdepth 1 -name 'libggml-cpu-*.so' | sort)
fi
[ "${#variants[@]}" -gt 0 ] || {
  echo "no libggml-cpu-*.so in $venv (llama_cpp/lib): is Hearth's build of llama-cpp-python installed?" >&2
  exit 1
}

if [ -x "$binary" ] && "$binary" --version >/dev/null 2>&1; then
  echo "reusing $target" >&2
  echo "$binary"
  exit 0
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/hearth-llama-server.XXXXXX")"
trap 'rm -rf "$work"' EXIT
started=$SECONDS

# packaging/llama_build.py is a script, not a module (and `packaging` is also PyPI's package's name).
"$py" - "$root/packaging/llama_build.py" "$work/src" "$py" >&2 <<'EOF'
import importlib.util, sys
from pathlib import Path

path, work, python = sys.argv[1:4]
spec = importlib.util.spec_from_file_location("llama_build", path)
assert spec is not None and spec.loader is not None
module = importlib.util.module_from_spec(spec)
sys.modules["llama_build"] = module
spec.loader.exec_module(module)
Path(work).mkdir(parents=True)
source = module.patched_source(python, Path(work))
(Path(work) / "SOURCE").write_text(f"{source}\n", encoding="utf-8")
EOF
source_dir="$(cat "$work/src/SOURCE")"

llama="$source_dir/vendor/llama.cpp"
[ -f "$llama/CMakeLists.txt" ] || { echo "no llama.cpp source at $llama" >&2; exit 1; }
nice -n 10 cmake -S "$llama" -B "$work/build" "${cmake_args[@]}" >&2
nice -n 10 cmake --build "$work/build" --target llama-server -j "$jobs" >&2

staging="$target.tmp-$$"
rm -rf "$staging"
mkdir -p "$staging"
# The binary and the shared libraries it was linked with, from the build's bin folder.
cp -P "$work/build/bin/llama-server" "$work/build/bin/"*.so* "$staging/"
for variant in "${variants[@]}"; do
  cp -L "$variant" "$staging/"
done
[ ! -e "$staging/libggml-cpu.so" ] || { echo "the build has a CPU backend of its own" >&2; exit 1; }
"$staging/llama-server" --version >&2
rm -rf "$target"
mv "$staging" "$target"
echo "built $target in $(( (SECONDS - started) / 60 )) min $(( (SECONDS - started) % 60 )) s" >&2
echo "$binary"
