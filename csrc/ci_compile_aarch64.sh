#!/usr/bin/env bash
# CI check for the aarch64 build of the CPU op on an x86-64 machine: cross-compile the op's C++
# sources as its build lists them (lintf.ops._ext.sources) for aarch64 against the installed torch's
# headers, then check that the portable vector path, the one aarch64 CPUs run, was lowered to NEON
# fused multiply-adds (fmla on 4 x fp32 lanes). No linking, nothing run.
#   usage: csrc/ci_compile_aarch64.sh [output_dir]   (needs aarch64-linux-gnu-g++, or CXX_AARCH64=...)
set -euo pipefail
out="${1:-$(mktemp -d)}"
mkdir -p "$out"
cxx="${CXX_AARCH64:-aarch64-linux-gnu-g++}"
objdump="${cxx%g++}objdump"
mapfile -t includes < <(python -c "from torch.utils.cpp_extension import include_paths; print('\n'.join(include_paths()))")
mapfile -t sources < <(python -c "from lintf.ops._ext import sources; print('\n'.join(map(str, sources(False))))")
python_include="$(python -c "import sysconfig; print(sysconfig.get_paths()['include'])")"
flags=(-std=c++17 -O3 -DNDEBUG -fPIC -fopenmp -Wall -isystem "$python_include")
for dir in "${includes[@]}"; do flags+=(-isystem "$dir"); done
for source in "${sources[@]}"; do
  "$cxx" "${flags[@]}" -c "$source" -o "$out/$(basename "${source%.*}").o"
done
portable="$out/causal_product_cpu_portable.o"
fmla="$("$objdump" -d "$portable" | grep -cE 'fmla[[:space:]]+v[0-9]+\.4s' || true)"
if [[ "$fmla" -eq 0 ]]; then
  echo "error: $portable has no NEON fmla: the portable path was not vectorised for aarch64" >&2
  exit 1
fi
echo "ok: ${#sources[@]} aarch64 object(s) in $out; the portable path has $fmla NEON fmla instructions"
