#!/usr/bin/env bash
# The GPU check, for a Linux machine with an NVIDIA GPU and no internet access: bars G1, G2 and P7 of
# ../shared/design/performance.md, one line per figure, in under 8 minutes.
#
#   bench/gpu_check.sh [WHEEL_DIR_OR_FILE]
#
# What it needs besides the project (set up with scripts/bootstrap.sh; its venv's own llama.cpp build does
# not matter) is under 60 MiB, in WHEEL_DIR (default bench/gpu/wheels/, next to this script):
#   llama_cpp_python-0.3.36-*.whl  a CUDA build for this GPU's architecture, deduplicated: ~45 MiB for one
#                                  architecture (packaging/build_llama_cuda.sh)
#   gguf-*.whl                     the pure-Python GGUF writer (0.1 MiB), to make the test model
# plus, from the machine: the NVIDIA driver, and the CUDA runtime and cuBLAS of the wheel's CUDA version
# (libcudart.so.N, libcublas.so.N, libcublasLt.so.N: a CUDA toolkit in $CUDA_HOME or /usr/local/cuda*, a
# folder on LD_LIBRARY_PATH, or the nvidia-cublas/nvidia-cuda-runtime wheels already in the venv).
#
# Fetch both wheels beforehand on a machine with internet (the CUDA build needs nvcc, not a GPU):
#   HEARTH_CUDA_ARCHS=90 packaging/build_llama_cuda.sh bench/gpu/wheels     # 90: H100/H200; 89: L4/L40,
#                                                                          # RTX 40xx; 86: A10, RTX 30xx
#   .venv/bin/python -m pip download --no-deps -d bench/gpu/wheels "gguf==0.19.0"
#
# It then installs both into build/gpu-check/site (first on PYTHONPATH; the venv is left as it was), makes
# its own test model (a 1.2 B-parameter llama-architecture GGUF with random Q8_0 weights and the starter
# model's tokenizer: bench/gpu/make_model.py), and runs bench/gpu/check.py: doctor sees the GPU, the plan
# offloads every layer, P7 predicted vs NVML-measured VRAM, G2 headroom after 2,000 generated tokens, a
# generated mixture-of-experts model loaded with its experts in system memory, a vision projector on the
# GPU with an image through it, G1 app path vs bare decode loop. Exits 1 when a bar is missed.
#
# Environment: HEARTH_VENV (default .venv), HEARTH_GPU_CHECK_TOKENS (default 2000),
# HEARTH_GPU_CHECK_MODEL=1b (default) or 3b (Llama-3.2-3B proportions, 3.3 GB), or tiny (2 layers: checks
# this script itself on any machine; see packaging/README.md).
# shellcheck disable=SC2012 # ls picks wheels by mtime; their names are [A-Za-z0-9._+-] only
set -euo pipefail

started=$SECONDS
limit_s=480
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
py="${HEARTH_VENV:-$root/.venv}/bin/python"
tokens="${HEARTH_GPU_CHECK_TOKENS:-2000}"
size="${HEARTH_GPU_CHECK_MODEL:-1b}"
source="${1:-$root/bench/gpu/wheels}"
work="$root/build/gpu-check"
site="$work/site"
[ -x "$py" ] || { echo "no venv at ${HEARTH_VENV:-.venv}: run scripts/bootstrap.sh first" >&2; exit 1; }

if [ -d "$source" ]; then
  llama_wheel="$(ls -t "$source"/llama_cpp_python-*.whl 2>/dev/null | head -n1 || true)"
  gguf_wheel="$(ls -t "$source"/gguf-*.whl 2>/dev/null | head -n1 || true)"
else
  llama_wheel="$source"
  gguf_wheel="$(ls -t "$(dirname "$source")"/gguf-*.whl 2>/dev/null | head -n1 || true)"
fi
[ -f "$llama_wheel" ] || { echo "no llama_cpp_python-*.whl in $source (see the top of $0)" >&2; exit 1; }
[ -f "$gguf_wheel" ] || { echo "no gguf-*.whl next to $llama_wheel (see the top of $0)" >&2; exit 1; }
wheels_mib=$(( ($(stat -c %s "$llama_wheel") + $(stat -c %s "$gguf_wheel")) / 1048576 ))
echo "wheels: $(basename "$llama_wheel") + $(basename "$gguf_wheel"), $wheels_mib MiB together (limit 60)"

if command -v nvidia-smi >/dev/null; then
  echo "nvidia-smi: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -n1)"
fi

# Offline: nothing may be fetched, and a proxy setting must not make anything try.
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
export HF_HUB_OFFLINE=1 PIP_NO_INDEX=1 QT_QPA_PLATFORM=offscreen

rm -rf "$site"
mkdir -p "$site"
"$py" -m pip install --quiet --disable-pip-version-check --no-index --no-deps --target "$site" \
  "$llama_wheel" "$gguf_wheel"
lib="$site/llama_cpp/lib"
ls "$lib"/libggml-cuda.so* >/dev/null 2>&1 || { echo "$llama_wheel is not a CUDA build" >&2; exit 1; }

# libggml-cuda finds its CUDA libraries next to itself ($ORIGIN) first: link them there from wherever this
# machine has them, so nothing depends on LD_LIBRARY_PATH reaching the runner process.
search=("${CUDA_HOME:-/nonexistent}/lib64" /usr/local/cuda/lib64 /usr/local/cuda/targets/*/lib)
mapfile -t -O "${#search[@]}" search < <(ls -d /usr/local/cuda-*/lib64 /usr/local/cuda-*/targets/*/lib \
  2>/dev/null | sort -rV)
IFS=: read -r -a from_env <<<"${LD_LIBRARY_PATH:-}"
search+=("${from_env[@]}")
mapfile -t -O "${#search[@]}" search < <("$py" -c \
  'import glob, site; [print(d) for p in site.getsitepackages() for d in glob.glob(p + "/nvidia/*/lib")]')
for _ in 1 2 3; do
  for name in $("$py" packaging/llama_libs.py needs "$lib" | grep -E '^lib(cudart|cublas|cublasLt)\.so' || true); do
    [ -e "$lib/$name" ] && continue
    found=""
    for dir in "${search[@]}"; do
      [ -n "$dir" ] && [ -e "$dir/$name" ] && { found="$dir/$name"; break; }
    done
    if [ -z "$found" ]; then
      found="$(ldconfig -p 2>/dev/null | awk -v n="$name" '$1 == n { print $NF; exit }')"
    fi
    [ -n "$found" ] || { echo "$name not found: install the CUDA toolkit or set CUDA_HOME" >&2; exit 1; }
    ln -s "$(readlink -f "$found")" "$lib/$name"
    echo "cuda: $name from $(dirname "$(readlink -f "$found")")"
  done
done
if ldd "$lib"/libggml-cuda.so* | grep -v 'libcuda\.so' | grep -q 'not found'; then
  ldd "$lib"/libggml-cuda.so* | grep 'not found' >&2
  exit 1
fi
export PYTHONPATH="$site:$root${PYTHONPATH:+:$PYTHONPATH}"
echo "install: $("$py" -c 'import importlib.metadata as m; print("llama-cpp-python", m.version("llama-cpp-python"), "+ gguf", m.version("gguf"))') into $site in $((SECONDS - started)) s"

# Random weights are enough for speed and memory; the same seed gives the same file, so a second run
# reuses it.
model="$work/hearth-gpu-check-$size-q8_0.gguf"
if [ ! -s "$model" ]; then
  "$py" -m bench.gpu.make_model "$work/partial.gguf" --size "$size" --type q8_0
  mv "$work/partial.gguf" "$model"
fi

left=$((limit_s - (SECONDS - started)))
status=0
timeout --signal=TERM --kill-after=10 "$left" "$py" -m bench.gpu.check "$model" --tokens "$tokens" || status=$?
[ "$status" = 124 ] && echo "timed out: the check must finish within $limit_s s" >&2
echo "total: $((SECONDS - started)) s (limit $limit_s s)"
exit "$status"
