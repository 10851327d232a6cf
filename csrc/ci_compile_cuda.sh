#!/usr/bin/env bash
# CI check for the CUDA kernels on machines without a GPU: compile the library's CUDA translation units
# (causal/cuda/causal_product_cuda.cu: the chunked tensor-core kernels, chunk*.cuh, the scan kernel and the
# ATen fallback; decayed/cuda/decayed_product_cuda.cu: the decayed product's chunked kernels and ATen form;
# gla/cuda/gla_cuda.cu: gated linear attention's chunked kernels; delta/cuda/delta_rule_cuda.cu: the delta
# rule's state sweeps and ATen part; all on the tiles of common/cuda/) to object files for each target
# architecture with nvcc against the installed torch's headers, and the C++ sources of the CPU half as the
# build lists them (lintf.ops.extension.build.sources), so both halves are checked with the flags a real
# CUDA build uses.
# No linking, nothing run; ptxas reports register spills. The kernels themselves run on the CPU in
# tests/ops/{causal,decayed,gla,delta}/test_cuda_emulated.py.
#   usage: csrc/ci_compile_cuda.sh [output_dir]      (needs nvcc on PATH or NVCC=/path/to/nvcc)
#   LINTF_CUDA_ARCHS="80 90" (default) picks the compute capabilities (sm_80: A100, sm_90: H100).
#   LINTF_CI_ONLY=cuda compiles the .cu files alone (the CPU half unchecked).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-$(mktemp -d)}"
mkdir -p "$out"
nvcc="${NVCC:-nvcc}"
read -r -a archs <<< "${LINTF_CUDA_ARCHS:-80 90}"
mapfile -t includes < <(python -c "from torch.utils.cpp_extension import include_paths; print('\n'.join(include_paths()))")
list_sources='from lintf.ops.extension.build import sources; print("\n".join(map(str, sources(True))))'
mapfile -t all_sources < <(python -c "$list_sources" 2>/dev/null || find "$here" -name '*.cpp' -o -name '*.cu' | sort)
abi="$(python -c "import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))")"
flags=(-std=c++17 -O3 -DNDEBUG "-D_GLIBCXX_USE_CXX11_ABI=${abi}" -Xcompiler -fPIC -Xcompiler -Wall -I "$here")
for dir in "${includes[@]}"; do flags+=(-isystem "$dir"); done
# CPU-only torch wheels ship c10/cuda headers without the generated macro header; stand one in
if [[ ! -f "${includes[0]}/c10/cuda/impl/cuda_cmake_macros.h" ]]; then
  mkdir -p "$out/shim/c10/cuda/impl"
  printf '#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n' > "$out/shim/c10/cuda/impl/cuda_cmake_macros.h"
  flags+=(-isystem "$out/shim")
fi
gencode=()
for arch in "${archs[@]}"; do gencode+=(-gencode "arch=compute_${arch},code=sm_${arch}"); done
cuda=0
cpu=0
set -x
for source in "${all_sources[@]}"; do
  name="$(basename "${source%.*}")"
  if [[ "$source" == *.cu ]]; then
    "$nvcc" "${flags[@]}" "${gencode[@]}" -Xptxas=-warn-spills --expt-relaxed-constexpr -D__CUDA_NO_HALF_OPERATORS__ \
      -D__CUDA_NO_HALF_CONVERSIONS__ -D__CUDA_NO_BFLOAT16_CONVERSIONS__ -D__CUDA_NO_HALF2_OPERATORS__ \
      -c "$source" -o "$out/${name}.cuda.o"
    cuda=$((cuda + 1))
  elif [[ "${LINTF_CI_ONLY:-}" != cuda ]]; then
    "$nvcc" "${flags[@]}" -x c++ -c "$source" -o "$out/${name}.o"
    cpu=$((cpu + 1))
  fi
done
set +x
echo "ok: $cuda CUDA object(s) (${archs[*]/#/sm_}) and $cpu CPU object(s) in $out"
