// The portable vector path of the CPU decayed causal product: decayed_product_sweeps.h compiled
// for the build's baseline ISA like causal_product_cpu_portable.cpp (16-byte vectors, 4-row
// register blocks). Runs on every CPU the library loads on.
#include "decayed_product.h"

#define LINTF_VECTOR_BYTES 16
#define LINTF_ROW_BLOCK 4
#include "decayed_product_sweeps.h"

namespace lintf::decayed {
const Path* portable_path() {
  static constexpr Path path{"portable", LINTF_VECTOR_BYTES, kPasses<float, float>, kPasses<double, double>,
                             kPasses<c10::Half, float>, kPasses<c10::BFloat16, float>};
  return &path;
}
}  // namespace lintf::decayed
