// The AVX2+FMA vector path of the CPU decayed causal product: decayed_product_sweeps.h compiled
// like causal_product_cpu_avx2.cpp (32-byte vectors, 6-row register blocks), and run when the
// causal product runs that path.
#include "decayed_product.h"

#if defined(__x86_64__) || defined(_M_X64)
#define LINTF_VECTOR_BYTES 32
#define LINTF_ROW_BLOCK 6
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif
#include "decayed_product_sweeps.h"
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

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
