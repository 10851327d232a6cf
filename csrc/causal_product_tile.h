// Register-blocked matrix product on small packed tiles for the CPU causal product.
//
// Every operand lives in a per-thread scratch buffer (row-major, fp32 or fp64), so the
// kernel needs no strides beyond a leading dimension and no ATen call. The inner loop keeps
// an MR x NR block of C in vector registers (GCC/Clang vector extensions; the width follows
// the -march the extension was built for) and streams rows of B through it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace lintf::tile {

#if defined(__AVX512F__)
constexpr int kVectorBytes = 64;
constexpr int kRowBlock = 8;
#elif defined(__AVX__)
constexpr int kVectorBytes = 32;
constexpr int kRowBlock = 6;
#else
constexpr int kVectorBytes = 16;
constexpr int kRowBlock = 4;
#endif

// Columns of C per register block: two vectors. Padded widths are multiples of this.
template <typename T>
constexpr int64_t kColBlock = 2 * kVectorBytes / static_cast<int64_t>(sizeof(T));

// Which part of the product is needed (the chunk's causal mask makes half of it zero).
enum class Shape {
  kFull,        // all of C
  kLowerOut,    // only C[i][j] with j <= i is used later (C is square)
  kUpperOut,    // only C[i][j] with j >= i is used later (C is square)
  kLowerA,      // A[i][p] == 0 for p > i: row block i needs p < i_end only
  kUpperA,      // A[i][p] == 0 for p < i: row block i needs p >= i_begin only
};

template <typename T>
struct VecOf {
  typedef T type __attribute__((vector_size(kVectorBytes)));
};
template <typename T>
using Vec = typename VecOf<T>::type;

template <typename T>
inline Vec<T> load(const T* p) {
  Vec<T> x;
  std::memcpy(&x, p, sizeof(x));
  return x;
}

template <typename T>
inline void store(T* p, const Vec<T>& x) {
  std::memcpy(p, &x, sizeof(x));
}

// C[MR x NR] (+)= A[MR x depth] B[depth x NR], NR = kColBlock<T>.
template <int MR, typename T>
inline void block(int64_t depth, const T* __restrict a, int64_t lda, const T* __restrict b, int64_t ldb,
                  T* __restrict c, int64_t ldc, bool accumulate) {
  constexpr int kWidth = kVectorBytes / sizeof(T);
  Vec<T> acc[MR][2];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    acc[i][0] = accumulate ? load<T>(c + i * ldc) : Vec<T>{};
    acc[i][1] = accumulate ? load<T>(c + i * ldc + kWidth) : Vec<T>{};
  }
  for (int64_t p = 0; p < depth; ++p) {
    const Vec<T> b0 = load<T>(b + p * ldb);
    const Vec<T> b1 = load<T>(b + p * ldb + kWidth);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const T ai = a[i * lda + p];
      acc[i][0] += ai * b0;
      acc[i][1] += ai * b1;
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    store<T>(c + i * ldc, acc[i][0]);
    store<T>(c + i * ldc + kWidth, acc[i][1]);
  }
}

// C[m x n] (+)= A[m x depth] B[depth x n], n a multiple of kColBlock<T>; `shape` skips the
// blocks the causal mask makes unnecessary (see Shape).
template <typename T>
void gemm(int64_t m, int64_t n, int64_t depth, const T* a, int64_t lda, const T* b, int64_t ldb, T* c,
          int64_t ldc, bool accumulate, Shape shape = Shape::kFull) {
  constexpr int64_t nr = kColBlock<T>;
  for (int64_t i0 = 0; i0 < m; i0 += kRowBlock) {
    const int64_t rows = std::min<int64_t>(kRowBlock, m - i0);
    const int64_t i_end = i0 + rows;
    int64_t j_begin = 0, j_end = n, p_begin = 0, p_end = depth;
    if (shape == Shape::kLowerOut) j_end = std::min(n, (i_end + nr - 1) / nr * nr);
    if (shape == Shape::kUpperOut) j_begin = i0 / nr * nr;
    if (shape == Shape::kLowerA) p_end = std::min(depth, i_end);
    if (shape == Shape::kUpperA) p_begin = i0;
    const T* a_rows = a + i0 * lda + p_begin;
    const T* b_rows = b + p_begin * ldb;
    for (int64_t j = j_begin; j < j_end; j += nr) {
      T* c_block = c + i0 * ldc + j;
      if (rows == kRowBlock) {
        block<kRowBlock>(p_end - p_begin, a_rows, lda, b_rows + j, ldb, c_block, ldc, accumulate);
      } else {
        for (int64_t r = 0; r < rows; ++r) {
          block<1>(p_end - p_begin, a_rows + r * lda, lda, b_rows + j, ldb, c_block + r * ldc, ldc, accumulate);
        }
      }
    }
  }
}

}  // namespace lintf::tile
