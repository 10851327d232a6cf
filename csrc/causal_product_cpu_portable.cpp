// The portable vector path of the CPU causal product: causal_product_sweeps.h compiled for the
// build's baseline ISA with 16-byte vectors (SSE2 on x86-64, NEON on aarch64): 4 x 2-vector state
// tiles in the recurrence, 4-row register blocks in the chunk sums. Runs on every CPU the library
// loads on.
#include "causal_product_cpu_plan.h"

#define LINTF_VECTOR_BYTES 16
#define LINTF_ROW_BLOCK 4
#include "causal_product_sweeps.h"

namespace lintf::cpu {
const VectorPath* portable_path() {
  static constexpr VectorPath path{"portable", LINTF_VECTOR_BYTES, sweep::kSweeps<float, float>,
                                   sweep::kSweeps<double, double>, sweep::kSweeps<c10::Half, float>,
                                   sweep::kSweeps<c10::BFloat16, float>};
  return &path;
}
}  // namespace lintf::cpu
