#!/usr/bin/env bash
# CI check for the aarch64 build of the CPU ops on an x86-64 machine: cross-compile the library's C++
# sources as its build lists them (lintf.ops.extension.build.sources) for aarch64 against the installed
# torch's headers, then check that the portable vector path of each op, the one aarch64 CPUs run, was
# lowered to NEON fused multiply-adds (fmla on 4 x fp32 lanes). No linking, nothing run.
#   usage: csrc/ci_compile_aarch64.sh [output_dir]   (needs aarch64-linux-gnu-g++, or CXX_AARCH64=...)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-$(mktemp -d)}"
mkdir -p "$out"
cxx="${CXX_AARCH64:-aarch64-linux-gnu-g++}"
objdump="${cxx%g++}objdump"
mapfile -t includes < <(python -c "from torch.utils.cpp_extension import include_paths; print('\n'.join(include_paths()))")
mapfile -t sources < <(python -c "from lintf.ops.extension.build import sources; print('\n'.join(map(str, sources(False))))")
python_include="$(python -c "import sysconfig; print(sysconfig.get_paths()['include'])")"
flags=(-std=c++17 -O3 -DNDEBUG -fPIC -fopenmp -Wall -I "$here" -isystem "$python_include")
for dir in "${includes[@]}"; do flags+=(-isystem "$dir"); done
for source in "${sources[@]}"; do
  "$cxx" "${flags[@]}" -c "$source" -o "$out/$(basename "${source%.*}").o"
done
report=""
for portable in "$out"/*_portable.o; do
  fmla="$("$objdump" -d "$portable" | grep -cE 'fmla[[:space:]]+v[0-9]+\.4s' || true)"
  if [[ "$fmla" -eq 0 ]]; then
    echo "error: $portable has no NEON fmla: the portable path was not vectorised for aarch64" >&2
    exit 1
  fi
  report="$report $(basename "$portable"): $fmla;"
done
if [[ -z "$report" ]]; then
  echo "error: no portable vector path (*_portable.o) among the objects in $out" >&2
  exit 1
fi
echo "ok: ${#sources[@]} aarch64 object(s) in $out; NEON fmla instructions in the portable paths:$report"
