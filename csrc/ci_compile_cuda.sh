#!/usr/bin/env bash
# CI check for the CUDA kernel on machines without a GPU: compile csrc/causal_product.cu to an
# object file with nvcc against the installed torch's headers (and the C++ source as well, so both
# halves of the op are checked with the flags a real CUDA build uses). No linking, nothing run.
#   usage: csrc/ci_compile_cuda.sh [output_dir]      (needs nvcc on PATH or NVCC=/path/to/nvcc)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-$(mktemp -d)}"
mkdir -p "$out"
nvcc="${NVCC:-nvcc}"
arch="${LINTF_CUDA_ARCH:-sm_80}"
mapfile -t includes < <(python -c "from torch.utils.cpp_extension import include_paths; print('\n'.join(include_paths()))")
abi="$(python -c "import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))")"
flags=(-std=c++17 -O3 -DNDEBUG "-D_GLIBCXX_USE_CXX11_ABI=${abi}" -Xcompiler -fPIC -Xcompiler -Wall)
for dir in "${includes[@]}"; do flags+=(-isystem "$dir"); done
# CPU-only torch wheels ship c10/cuda headers without the generated macro header; stand one in
if [[ ! -f "${includes[0]}/c10/cuda/impl/cuda_cmake_macros.h" ]]; then
  mkdir -p "$out/shim/c10/cuda/impl"
  printf '#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n' > "$out/shim/c10/cuda/impl/cuda_cmake_macros.h"
  flags+=(-isystem "$out/shim")
fi
set -x
"$nvcc" "${flags[@]}" -arch="$arch" --expt-relaxed-constexpr -D__CUDA_NO_HALF_OPERATORS__ \
  -D__CUDA_NO_HALF_CONVERSIONS__ -D__CUDA_NO_BFLOAT16_CONVERSIONS__ -D__CUDA_NO_HALF2_OPERATORS__ \
  -c "$here/causal_product.cu" -o "$out/causal_product_cuda.o"
"$nvcc" "${flags[@]}" -x c++ -c "$here/causal_product.cpp" -o "$out/causal_product_cpu.o"
set +x
echo "ok: $out/causal_product_cuda.o $out/causal_product_cpu.o"
