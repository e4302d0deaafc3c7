#!/usr/bin/env bash
# Build a CUDA wheel of llama-cpp-python on a machine that has nvcc but not necessarily cuBLAS or a GPU.
#
#   packaging/build_llama_cuda.sh [OUTPUT_DIR]
#
# OUTPUT_DIR defaults to the wheel cache's folder for this flavour (packaging/llama_build.py), where
# scripts/bootstrap.sh and packaging/build_linux.sh look for it.
#
# nvcc: $CUDACXX, else nvcc on PATH, else $CUDA_HOME/bin/nvcc, else /usr/local/cuda/bin/nvcc.
# cuBLAS (headers and libraries to link against): from that toolkit when it has them, else from PyPI's
# nvidia-cublas and nvidia-cuda-runtime wheels for nvcc's CUDA major version. The system toolkit is never
# modified (its lib64 is often a symlink into targets/): a private toolkit folder links its files and the
# wheels' side by side.
#
# HEARTH_CUDA_CHECK_ONLY=1 stops before the build: it assembles the toolkit and compiles and links a small
# cuBLAS program for the first architecture (seconds, no GPU needed), to check a machine is ready.
#
# HEARTH_CUDA_ARCHS picks the GPU architectures (default "86;89;90": RTX 30xx/A10/A40, RTX 40xx/L4/L40,
# H100/H200). Each costs about 24 min of build on 2 cores and ~60 MB in libggml-cuda.so; CUDA 13 builds
# 75 (Turing) and newer only. Add "-virtual" to the newest one (e.g. "86;89;90;90-virtual") to let newer
# GPUs JIT-compile PTX at their first load instead of failing.
#
# The wheel is built with
#   GGML_CUDA_NO_VMM=ON  libggml-cuda does not link libcuda.so.1 (the driver), so it loads on a machine
#                        without one; llama.cpp then finds no CUDA device and Hearth runs on the CPU, saying
#                        why ("has CUDA support but found no usable GPU or driver");
#   the CPU backend of the CPU wheel (packaging/llama_build.py): one library per x86-64 CPU variant, the
#                        best chosen at run time, never the build machine's -march=native.
# and deduplicated (packaging/llama_libs.py dedupe-wheel): pip's wheel holds every library 3-4 times
# (symlinks become copies), 268 MB for sm_90 alone; after it, one copy of each that is loaded at run time.
# At run time it needs libcudart.so.N, libcublas.so.N and libcublasLt.so.N (packaging/build_linux.sh with
# HEARTH_BACKEND=cuda bundles them; bench/gpu_check.sh expects them from the GPU machine's toolkit) and an
# NVIDIA driver that supports CUDA N.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="${HEARTH_VENV:-$root/.venv}/bin/python"
archs="${HEARTH_CUDA_ARCHS:-86;89;90}"
[ -x "$py" ] || { echo "no venv python at $py (set HEARTH_VENV)" >&2; exit 1; }
llama_version="$("$py" "$root/packaging/llama_build.py" version)"
out="${1:-${XDG_CACHE_HOME:-$HOME/.cache}/hearth/wheels/$(HEARTH_CUDA_ARCHS="$archs" "$py" "$root/packaging/llama_build.py" flavour cuda)}"
arch_pattern='^[0-9]+[af]?(-real|-virtual)?(;[0-9]+[af]?(-real|-virtual)?)*$'
if ! [[ "$archs" =~ $arch_pattern ]]; then
  echo "HEARTH_CUDA_ARCHS must look like \"86;89;90\", not \"$archs\"" >&2
  exit 2
fi

nvcc="${CUDACXX:-$(command -v nvcc || true)}"
for candidate in "${CUDA_HOME:-}/bin/nvcc" /usr/local/cuda/bin/nvcc; do
  [ -n "$nvcc" ] && break
  [ -x "$candidate" ] && nvcc="$candidate"
done
[ -n "$nvcc" ] || { echo "nvcc not found: install the CUDA toolkit, put its bin/ on PATH or set CUDACXX" >&2; exit 1; }
# nvcc on PATH may be a symlink or a wrapper script (/usr/local/bin/nvcc here): ask nvcc where its
# toolkit is, and use the real binary from there.
top="$("$nvcc" --dryrun -c -x cu /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ TOP=//p' | head -n1)"
system_cuda="$(cd "${top:-$(dirname "$(readlink -f "$nvcc")")/..}" && pwd -P)"
nvcc="$system_cuda/bin/nvcc"
if [ ! -x "$nvcc" ] || [ ! -d "$system_cuda/include" ]; then
  echo "no CUDA toolkit around $nvcc" >&2
  exit 1
fi
major="$("$nvcc" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')"
supported="$("$nvcc" --list-gpu-arch | sed -n 's/^compute_//p' | tr '\n' ' ')"
for arch in ${archs//;/ }; do
  number="${arch%%-*}"
  case " $supported " in
    *" ${number%[af]} "*) ;;
    *) echo "nvcc $major cannot build sm_$number (it builds: $supported)" >&2; exit 2 ;;
  esac
done
echo "nvcc $("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p') from $system_cuda; architectures $archs"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
toolkit="$work/cuda"
mkdir -p "$toolkit/include" "$toolkit/lib64" "$toolkit/bin"
ln -s "$system_cuda"/bin/* "$toolkit/bin/"
ln -s "$system_cuda"/include/* "$toolkit/include/"
# lib64 may itself be a symlink (targets/x86_64-linux/lib): link its files, not the folder.
system_lib="$(readlink -f "$system_cuda/lib64")"
[ -d "$system_lib" ] || { echo "no lib64/ in $system_cuda" >&2; exit 1; }
ln -s "$system_lib"/* "$toolkit/lib64/"

if [ ! -e "$toolkit/include/cublas_v2.h" ]; then
  echo "The CUDA toolkit has no cuBLAS; taking it from the nvidia-cublas wheel (CUDA $major)"
  "$py" -m pip install --quiet --disable-pip-version-check --target "$work/wheels" \
    "nvidia-cublas==$major.*" "nvidia-cuda-runtime==$major.*"
  # CUDA 13 wheels keep everything under nvidia/cu13/, CUDA 12 ones under nvidia/<component>/.
  for dir in "$work"/wheels/nvidia/*/include; do
    for f in "$dir"/*; do [ -e "$toolkit/include/$(basename "$f")" ] || ln -s "$f" "$toolkit/include/"; done
  done
  for dir in "$work"/wheels/nvidia/*/lib; do
    for f in "$dir"/*; do [ -e "$toolkit/lib64/$(basename "$f")" ] || ln -s "$f" "$toolkit/lib64/"; done
  done
  for lib in cublas cublasLt; do
    [ -e "$toolkit/lib64/lib$lib.so" ] || ln -s "lib$lib.so.$major" "$toolkit/lib64/lib$lib.so"
  done
  # The exact versions linked against; build_linux.sh bundles the same ones (cuda-runtime.txt next to the
  # wheel).
  "$py" -c 'import importlib.metadata as m, sys
for d in sorted(m.distributions(path=[sys.argv[1]]), key=lambda d: d.name):
    print(d.name + "==" + d.version)' "$work/wheels" >"$work/cuda-runtime.txt"
fi
[ -e "$toolkit/include/cublas_v2.h" ] || { echo "no cublas_v2.h in the toolkit or the wheel" >&2; exit 1; }

if [ "${HEARTH_CUDA_CHECK_ONLY:-0}" = 1 ]; then
  first="${archs%%;*}"
  first="${first%%-*}"
  cat >"$work/probe.cu" <<'EOF'
#include <cstdio>
#include <cublas_v2.h>
#include <cuda_runtime.h>
int main() {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    cublasHandle_t handle;
    cublasStatus_t status = cublasCreate(&handle);
    std::printf("probe: %d CUDA device(s) (%s); cublasCreate status %d\n", count, cudaGetErrorString(err),
                static_cast<int>(status));
    return 0;
}
EOF
  "$nvcc" -arch="sm_$first" -I"$toolkit/include" -L"$toolkit/lib64" -o "$work/probe" "$work/probe.cu" -lcublas
  echo "toolkit ready: nvcc compiled and linked a cuBLAS program for sm_$first"
  # Without a driver the probe still runs and says so, as the app's CUDA build does on such a machine.
  LD_LIBRARY_PATH="$toolkit/lib64" "$work/probe" || true
  exit 0
fi

started=$SECONDS
mkdir -p "$work/out"
# The CPU side is the same as the CPU wheel's (packaging/llama_build.py: every CPU variant, chosen at run
# time, Hearth's patches); these options add the CUDA backend, built from this toolkit.
CUDAToolkit_ROOT="$toolkit" CUDACXX="$nvcc" HEARTH_CUDA_ARCHS="$archs" \
  HEARTH_EXTRA_CMAKE_ARGS="-DCMAKE_CUDA_ARCHITECTURES=$archs -DCUDAToolkit_ROOT=$toolkit \
-DCMAKE_CUDA_FLAGS=-I$toolkit/include -DCMAKE_LIBRARY_PATH=$toolkit/lib64 -DGGML_CUDA_NO_VMM=ON" \
  "$py" "$root/packaging/llama_build.py" wheel cuda "$work/out"
wheel="$(ls "$work"/out/llama_cpp_python-"$llama_version"-*.whl)"

# Check what was built: the CUDA backend is there, it does not need the driver to load, and it carries
# code for the requested architectures.
"$py" - "$wheel" "$toolkit/bin/cuobjdump" <<'PY'
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

wheel, cuobjdump = sys.argv[1], Path(sys.argv[2])
with zipfile.ZipFile(wheel) as z, tempfile.TemporaryDirectory() as tmp:
    names = [n for n in z.namelist() if n.startswith("llama_cpp/lib/libggml-cuda")]
    if not names:
        sys.exit(f"{wheel} has no libggml-cuda: the CUDA backend was not built")
    lib = Path(tmp) / "libggml-cuda.so"
    lib.write_bytes(z.read(names[0]))
    needed = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True).stdout
    if "libcuda.so" in needed:
        sys.exit("libggml-cuda links the driver (libcuda.so.1): it would not load on a machine without one")
    runtime = sorted(set(re.findall(r"\[(libcu\w+\.so\.\d+)\]", needed)))
    archs = "?"
    if cuobjdump.exists():
        listing = subprocess.run([str(cuobjdump), "--list-elf", str(lib)], capture_output=True, text=True)
        archs = " ".join(sorted(set(re.findall(r"sm_\d+\w?", listing.stdout)))) or "?"
    print(f"libggml-cuda: {lib.stat().st_size / 2**20:.0f} MiB, SASS for {archs}, needs {', '.join(runtime)}")
PY
mkdir -p "$out"
mv "$wheel" "$out/"
[ -f "$work/cuda-runtime.txt" ] && cp "$work/cuda-runtime.txt" "$out/cuda-runtime.txt"
echo "$out/$(basename "$wheel"): $(( $(stat -c %s "$out/$(basename "$wheel")") / 1048576 )) MiB," \
  "built in $(( (SECONDS - started) / 60 )) min for $archs"
