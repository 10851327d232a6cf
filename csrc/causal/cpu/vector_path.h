// One vector path of the CPU causal product: sweeps.h compiled inside the path's target region and
// exported as its VectorPath table <path>_path() (plan.h), the unit's only external symbol.
// Instantiated by causal_product_{avx512,avx2,portable}.cpp, which define the path first
// (common/cpu/target.h).
#pragma once

#include "causal/cpu/plan.h"
#include "common/cpu/target.h"

#if LINTF_PATH_COMPILED
LINTF_PATH_BEGIN
#include "causal/cpu/sweeps.h"
LINTF_PATH_END

namespace lintf::cpu {
const VectorPath* LINTF_PATH_TABLE() {
  static constexpr VectorPath path{LINTF_PATH_NAME, LINTF_VECTOR_BYTES, sweep::kSweeps<float, float>,
                                   sweep::kSweeps<double, double>, sweep::kSweeps<c10::Half, float>,
                                   sweep::kSweeps<c10::BFloat16, float>};
  return &path;
}
}  // namespace lintf::cpu
#else
namespace lintf::cpu {
const VectorPath* LINTF_PATH_TABLE() { return nullptr; }
}  // namespace lintf::cpu
#endif
