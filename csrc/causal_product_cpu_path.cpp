// Run-time choice of the CPU causal product's vector path, from the CPU's reported features and
// the LINTF_CPU_PATH environment variable, and the ops that tell Python which path runs:
//   lintf::cpu_vector_path() -> str     the path calls use now (what LINTF_CPU_PATH or the CPU picks)
//   lintf::cpu_vector_paths() -> str[]  the paths this CPU can run, widest first
// Baseline ISA: nothing here executes a wider instruction than the build's defaults.
#include "causal_product_cpu_plan.h"

#include <torch/library.h>

#include <cstdlib>

namespace lintf::cpu {
namespace {

// The paths in order of preference; a null entry was not compiled into this build.
std::vector<const VectorPath*> compiled_paths() { return {avx512_path(), avx2_path(), portable_path()}; }

bool cpu_runs(const VectorPath& path) {
  const std::string name = path.name;
#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  // libgcc and compiler-rt also check that the OS saves the wider registers (XCR0).
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (name == "avx512") return avx2 && __builtin_cpu_supports("avx512f");
  if (name == "avx2") return avx2;
#endif
  return name == "portable";
}

std::string joined(const std::vector<std::string>& names) {
  std::string text;
  for (const auto& name : names) text += (text.empty() ? "" : ", ") + name;
  return text;
}

}  // namespace

std::vector<std::string> supported_paths() {
  std::vector<std::string> names;
  for (const VectorPath* path : compiled_paths()) {
    if (path != nullptr && cpu_runs(*path)) names.emplace_back(path->name);
  }
  return names;
}

const VectorPath& selected_path() {
  const char* forced = std::getenv("LINTF_CPU_PATH");
  const std::string wanted = forced == nullptr ? "" : forced;
  const std::vector<std::string> known = {"avx512", "avx2", "portable"};
  TORCH_CHECK_VALUE(wanted.empty() || std::find(known.begin(), known.end(), wanted) != known.end(),
                    "lintf: LINTF_CPU_PATH=", wanted, " is not a vector path; choose one of ", joined(known),
                    " or leave it unset for the widest this CPU runs");
  for (const VectorPath* path : compiled_paths()) {
    if (path == nullptr || !cpu_runs(*path)) continue;
    if (wanted.empty() || wanted == path->name) return *path;
  }
  TORCH_CHECK_VALUE(false, "lintf: LINTF_CPU_PATH=", wanted, " asks for a vector path this CPU (or this build) ",
                    "cannot run; this CPU runs: ", joined(supported_paths()));
}

}  // namespace lintf::cpu

TORCH_LIBRARY_FRAGMENT(lintf, m) {
  m.def("cpu_vector_path() -> str", [] { return std::string(lintf::cpu::selected_path().name); });
  m.def("cpu_vector_paths() -> str[]", [] { return lintf::cpu::supported_paths(); });
}
