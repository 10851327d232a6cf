// One vector path of the CPU decayed causal product: passes.h (with the sweeps.h it runs) compiled
// inside the path's target region and exported as its Path table <path>_path() (../decayed_product.h),
// the unit's only external symbol. Instantiated by decayed_product_{avx512,avx2,portable}.cpp, which define the path
// first (common/cpu/target.h); it runs when the causal product runs the same path.
#pragma once

#include "common/cpu/target.h"
#include "decayed/decayed_product.h"

#if LINTF_PATH_COMPILED
LINTF_PATH_BEGIN
#include "decayed/cpu/passes.h"
LINTF_PATH_END

namespace lintf::decayed {
const Path* LINTF_PATH_TABLE() {
  static constexpr Path path{LINTF_PATH_NAME, LINTF_VECTOR_BYTES, kPasses<float, float>, kPasses<double, double>,
                             kPasses<c10::Half, float>, kPasses<c10::BFloat16, float>};
  return &path;
}
}  // namespace lintf::decayed
#else
namespace lintf::decayed {
const Path* LINTF_PATH_TABLE() { return nullptr; }
}  // namespace lintf::decayed
#endif
