// Run-time choice of the CPU ops' vector path, from the CPU's reported features and the
// LINTF_CPU_PATH environment variable (common/cpu/path.h). Baseline ISA: nothing here executes a
// wider instruction than the build's defaults.
#include "common/cpu/path.h"

#include <c10/util/Exception.h>

#include <cstdlib>

namespace lintf::cpu {
namespace {

// The paths in order of preference.
const std::vector<std::string>& known_paths() {
  static const std::vector<std::string> names = {"avx512", "avx2", "portable"};
  return names;
}

// Whether this CPU runs the path; the x86-64 paths are compiled into x86-64 builds only.
bool cpu_runs(const std::string& name) {
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
  for (const auto& name : known_paths()) {
    if (cpu_runs(name)) names.push_back(name);
  }
  return names;
}

std::string selected_path() {
  const char* forced = std::getenv("LINTF_CPU_PATH");
  const std::string wanted = forced == nullptr ? "" : forced;
  const auto& known = known_paths();
  TORCH_CHECK_VALUE(wanted.empty() || std::find(known.begin(), known.end(), wanted) != known.end(),
                    "lintf: LINTF_CPU_PATH=", wanted, " is not a vector path; choose one of ", joined(known),
                    " or leave it unset for the widest this CPU runs");
  for (const auto& name : known) {
    if (cpu_runs(name) && (wanted.empty() || wanted == name)) return name;
  }
  TORCH_CHECK_VALUE(false, "lintf: LINTF_CPU_PATH=", wanted, " asks for a vector path this CPU (or this build) ",
                    "cannot run; this CPU runs: ", joined(supported_paths()));
}

}  // namespace lintf::cpu
