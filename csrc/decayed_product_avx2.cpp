// The AVX2+FMA vector path of the CPU decayed causal product: decayed_product_sweeps.h compiled
// like causal_product_cpu_avx2.cpp (32-byte vectors, 6-row register blocks), and run when the
// causal product runs that path.
#include "decayed_product.h"
#include "cpu_target.h"

#if defined(__x86_64__) || defined(_M_X64)
#define LINTF_VECTOR_BYTES 32
#define LINTF_ROW_BLOCK 6
LINTF_TARGET_BEGIN("avx2,fma")
#include "decayed_product_sweeps.h"
LINTF_TARGET_END

namespace lintf::decayed {
const Path* avx2_path() {
  static constexpr Path path{"avx2", LINTF_VECTOR_BYTES, kPasses<float, float>, kPasses<double, double>,
                             kPasses<c10::Half, float>, kPasses<c10::BFloat16, float>};
  return &path;
}
}  // namespace lintf::decayed
#else
namespace lintf::decayed {
const Path* avx2_path() { return nullptr; }
}  // namespace lintf::decayed
#endif
