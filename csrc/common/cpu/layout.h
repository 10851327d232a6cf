// How the CPU ops lay out one call: chunks of kChunk positions, feature widths padded to the vector
// path's register block (Dims), and 64-byte aligned scratch buffers.
//
// Included first by every translation unit of the CPU ops, before any target region, so its inline
// code and everything it includes are compiled for the baseline ISA everywhere.
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

namespace lintf::cpu {

constexpr int64_t kChunk = 32;  // positions per chunk: the unit of every sweep
constexpr int64_t kAlignBytes = 64;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Sizes of one call. cp and mp pad C and M to the path's register block; a running state is a
// padded (cp x mp) matrix (or its (mp x cp) transpose), then cp normaliser entries, then padding to
// the alignment.
struct Dims {
  int64_t heads, n, c, m, cp, mp, chunks;

  Dims(int64_t heads_, int64_t n_, int64_t c_, int64_t m_, int64_t col_block)
      : heads(heads_), n(n_), c(c_), m(m_), cp(ceil_div(c_, col_block) * col_block),
        mp(ceil_div(m_, col_block) * col_block), chunks(ceil_div(n_, kChunk)) {}

  int64_t state_size() const { return cp * mp + cp; }
  int64_t state_stride() const { return ceil_div(state_size(), 16) * 16; }  // 64-byte aligned for fp32 and fp64
};

// A zero-filled buffer of n elements whose data() is 64-byte aligned.
template <typename T>
class AlignedBuffer {
 public:
  explicit AlignedBuffer(int64_t n) : storage_(n + kAlignBytes / sizeof(T), T(0)) {
    const auto address = reinterpret_cast<std::uintptr_t>(storage_.data());
    data_ = storage_.data() + (kAlignBytes - address % kAlignBytes) % kAlignBytes / sizeof(T);
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  T* data() { return data_; }
  const T* data() const { return data_; }

 private:
  std::vector<T> storage_;
  T* data_;
};

}  // namespace lintf::cpu
