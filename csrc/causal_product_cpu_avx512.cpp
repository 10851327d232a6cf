// The AVX-512 vector path of the CPU causal product: causal_product_sweeps.h compiled for
// AVX-512F (+AVX2, FMA) with 64-byte vectors: 8 x 2-vector state tiles in the recurrence, 8-row
// register blocks (16 of the 32 vector registers) in the chunk sums. Selected at run time only on
// CPUs that report AVX-512F (causal_product_cpu_path.cpp); the rest of the library stays baseline
// x86-64.
#include "causal_product_cpu_plan.h"
#include "cpu_target.h"

#if defined(__x86_64__) || defined(_M_X64)
#define LINTF_VECTOR_BYTES 64
#define LINTF_ROW_BLOCK 8
LINTF_TARGET_BEGIN("avx512f,avx2,fma")
#include "causal_product_sweeps.h"
LINTF_TARGET_END

namespace lintf::cpu {
const VectorPath* avx512_path() {
  static constexpr VectorPath path{"avx512", LINTF_VECTOR_BYTES, sweep::kSweeps<float, float>,
                                   sweep::kSweeps<double, double>, sweep::kSweeps<c10::Half, float>,
                                   sweep::kSweeps<c10::BFloat16, float>};
  return &path;
}
}  // namespace lintf::cpu
#else
namespace lintf::cpu {
const VectorPath* avx512_path() { return nullptr; }
}  // namespace lintf::cpu
#endif
