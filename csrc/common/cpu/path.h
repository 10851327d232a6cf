// The vector paths of the CPU ops (AVX-512, AVX2+FMA, portable): which one runs, and the table of
// kernels each op compiles per path.
//
// A vector path of an op is one translation unit per ISA (<op>/cpu/<op>_<path>.cpp) that compiles
// the op's kernels inside a target region (common/cpu/target.h) and exports one PathTable. The rest of
// the library is baseline ISA: it asks selected_path() which path runs and takes that table.
#pragma once

#include "common/cpu/layout.h"

#include <c10/util/Exception.h>

#include <initializer_list>

namespace lintf::cpu {

// The path calls run now: LINTF_CPU_PATH if set (a ValueError if unknown or unsupported by this
// CPU), else the widest this CPU supports. Reads the environment on every call.
std::string selected_path();
// Names of the paths this CPU can run, widest first.
std::vector<std::string> supported_paths();

// One op's kernels on one vector path, for each input dtype; Kernels<scalar_t, T> holds the
// functions for inputs of scalar_t accumulating in T.
template <template <typename, typename> class Kernels>
struct PathTable {
  const char* name;  // "avx512", "avx2", "portable": the values of LINTF_CPU_PATH
  int64_t vector_bytes;
  Kernels<float, float> f32;
  Kernels<double, double> f64;
  Kernels<c10::Half, float> f16;
  Kernels<c10::BFloat16, float> bf16;

  // Columns per register block (two vectors): padded widths are multiples of this.
  template <typename T>
  int64_t col_block() const { return 2 * vector_bytes / static_cast<int64_t>(sizeof(T)); }

  template <typename scalar_t>
  const auto& kernels() const {
    if constexpr (std::is_same_v<scalar_t, float>) return f32;
    else if constexpr (std::is_same_v<scalar_t, double>) return f64;
    else if constexpr (std::is_same_v<scalar_t, c10::Half>) return f16;
    else return bf16;
  }
};

// The table of the path that runs now among an op's tables (null: a path not compiled into this
// build, the x86-64 ones elsewhere).
template <typename Table>
const Table& selected_table(std::initializer_list<const Table*> tables, const char* op) {
  const std::string name = selected_path();
  for (const Table* table : tables) {
    if (table != nullptr && name == table->name) return *table;
  }
  TORCH_CHECK(false, op, ": no kernel for the vector path ", name);
}

}  // namespace lintf::cpu
