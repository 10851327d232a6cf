// The AVX2+FMA vector path of the CPU causal product: causal_product_sweeps.h compiled for AVX2
// and FMA with 32-byte vectors: 4 x 2-vector state tiles in the recurrence, 6-row register blocks
// (12 of the 16 vector registers) in the chunk sums. Selected at run time only on CPUs that report
// both (causal_product_cpu_path.cpp).
#include "causal_product_cpu_plan.h"
#include "cpu_target.h"

#if defined(__x86_64__) || defined(_M_X64)
#define LINTF_VECTOR_BYTES 32
#define LINTF_ROW_BLOCK 6
LINTF_TARGET_BEGIN("avx2,fma")
#include "causal_product_sweeps.h"
LINTF_TARGET_END

namespace lintf::cpu {
const VectorPath* avx2_path() {
  static constexpr VectorPath path{"avx2", LINTF_VECTOR_BYTES, sweep::kSweeps<float, float>,
                                   sweep::kSweeps<double, double>, sweep::kSweeps<c10::Half, float>,
                                   sweep::kSweeps<c10::BFloat16, float>};
  return &path;
}
}  // namespace lintf::cpu
#else
namespace lintf::cpu {
const VectorPath* avx2_path() { return nullptr; }
}  // namespace lintf::cpu
#endif
