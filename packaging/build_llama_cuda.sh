#!/usr/bin/env bash
# Build a CUDA wheel of llama-cpp-python on a machine that has nvcc but not necessarily cuBLAS or a GPU.
#
#   packaging/build_llama_cuda.sh OUTPUT_DIR
#
# cuBLAS comes from the toolkit when it has it, else from PyPI's nvidia-cublas wheel. The system toolkit is
# never modified: a private toolkit folder links its files and the wheel's side by side.
# HEARTH_CUDA_ARCHS picks the GPU architectures (default "86;89;90": RTX 30xx, RTX 40xx, H100/H200);
# each one adds build time and roughly 60 MB to libggml-cuda.so.
set -euo pipefail

out="${1:?usage: $0 OUTPUT_DIR}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="${HEARTH_VENV:-$root/.venv}/bin/python"
llama_version="0.3.36"
archs="${HEARTH_CUDA_ARCHS:-86;89;90}"

nvcc="$(command -v nvcc || true)"
[ -n "$nvcc" ] || { echo "nvcc not found: install the CUDA toolkit or put its bin/ on PATH" >&2; exit 1; }
system_cuda="$(cd "$(dirname "$nvcc")/.." && pwd -P)"
major="$("$nvcc" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
toolkit="$work/cuda"
mkdir -p "$toolkit/include" "$toolkit/lib64" "$toolkit/bin"
ln -s "$system_cuda"/bin/* "$toolkit/bin/"
ln -s "$system_cuda"/include/* "$toolkit/include/"
# lib64 may itself be a symlink (targets/x86_64-linux/lib): link its files, not the folder.
ln -s "$(cd "$system_cuda/lib64" && pwd -P)"/* "$toolkit/lib64/"

if [ ! -e "$toolkit/include/cublas_v2.h" ]; then
  echo "The CUDA toolkit has no cuBLAS; taking it from the nvidia-cublas wheel (CUDA $major)"
  "$py" -m pip install --quiet --target "$work/wheels" "nvidia-cublas==$major.*" "nvidia-cuda-runtime==$major.*"
  for dir in "$work"/wheels/nvidia/cu"$major"/include "$work"/wheels/nvidia/*/include; do
    [ -d "$dir" ] && for f in "$dir"/*; do [ -e "$toolkit/include/$(basename "$f")" ] || ln -s "$f" "$toolkit/include/"; done
  done
  for dir in "$work"/wheels/nvidia/cu"$major"/lib "$work"/wheels/nvidia/*/lib; do
    [ -d "$dir" ] && for f in "$dir"/*; do [ -e "$toolkit/lib64/$(basename "$f")" ] || ln -s "$f" "$toolkit/lib64/"; done
  done
  for lib in cublas cublasLt; do
    [ -e "$toolkit/lib64/lib$lib.so" ] || ln -s "lib$lib.so.$major" "$toolkit/lib64/lib$lib.so"
  done
fi

mkdir -p "$out"
CUDAToolkit_ROOT="$toolkit" CUDACXX="$nvcc" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
  CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=$archs -DCUDAToolkit_ROOT=$toolkit \
-DCMAKE_CUDA_FLAGS=-I$toolkit/include -DCMAKE_LIBRARY_PATH=$toolkit/lib64 -DGGML_CUDA_NO_VMM=ON -DGGML_NATIVE=OFF" \
  "$py" -m pip wheel --no-deps --no-cache-dir -w "$out" "llama-cpp-python==$llama_version"
