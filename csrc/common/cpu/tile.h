// Register-blocked matrix product on small packed tiles for the CPU ops' sweeps.
//
// Included once by each vector-path translation unit of an op (<op>/cpu/<op>_{avx512,avx2,portable}.cpp,
// through its vector_path.h) inside its target region, after it defines LINTF_VECTOR_BYTES (64, 32 or 16) and LINTF_ROW_BLOCK.
// Everything here has internal linkage, so the three compilations never meet at link time.
//
// Every operand lives in a per-thread scratch buffer (row-major, fp32 or fp64), so the kernel
// needs no strides beyond a leading dimension and no ATen call. The inner loop keeps an MR x NR
// block of C in vector registers (GCC/Clang vector extensions, lowered to the instructions of the
// enclosing target region) and streams rows of B through it.
#pragma once

#include "common/cpu/prefetch.h"

#if !defined(LINTF_VECTOR_BYTES) || !defined(LINTF_ROW_BLOCK)
#error "define LINTF_VECTOR_BYTES and LINTF_ROW_BLOCK before including common/cpu/tile.h"
#endif

namespace lintf::tile {
namespace {

constexpr int kVectorBytes = LINTF_VECTOR_BYTES;
constexpr int kRowBlock = LINTF_ROW_BLOCK;

// Elements of T per vector register.
template <typename T>
constexpr int64_t kWidth = kVectorBytes / static_cast<int64_t>(sizeof(T));

// Columns of C per register block: two vectors. Padded widths are multiples of this.
template <typename T>
constexpr int64_t kColBlock = 2 * kWidth<T>;

// Which part of the product is needed (the chunk's causal mask makes half of it zero).
enum class Shape {
  kFull,      // all of C
  kLowerOut,  // only C[i][j] with j <= i is used later (C is square)
  kUpperOut,  // only C[i][j] with j >= i is used later (C is square)
  kLowerA,    // A[i][p] == 0 for p > i: row block i needs p < i_end only
  kUpperA,    // A[i][p] == 0 for p < i: row block i needs p >= i_begin only
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

// Stores x at p (vector-aligned) without reading p's cache line first and without keeping it in
// the caches: for output rows written once. Needs fence() before other threads read them.
template <typename T>
inline void stream(T* p, const Vec<T>& x) {
#if (defined(__x86_64__) || defined(_M_X64)) && LINTF_VECTOR_BYTES == 64
  if constexpr (sizeof(T) == 4) _mm512_stream_ps(p, reinterpret_cast<const __m512&>(x));
  else _mm512_stream_pd(p, reinterpret_cast<const __m512d&>(x));
#elif (defined(__x86_64__) || defined(_M_X64)) && LINTF_VECTOR_BYTES == 32
  if constexpr (sizeof(T) == 4) _mm256_stream_ps(p, reinterpret_cast<const __m256&>(x));
  else _mm256_stream_pd(p, reinterpret_cast<const __m256d&>(x));
#elif (defined(__x86_64__) || defined(_M_X64)) && LINTF_VECTOR_BYTES == 16
  if constexpr (sizeof(T) == 4) _mm_stream_ps(p, reinterpret_cast<const __m128&>(x));
  else _mm_stream_pd(p, reinterpret_cast<const __m128d&>(x));
#else
  store<T>(p, x);
#endif
}

// Orders the stream() stores before whatever this thread does next (a no-op off x86).
inline void fence() {
#if defined(__x86_64__) || defined(_M_X64)
  _mm_sfence();
#endif
}

template <typename T>
inline T horizontal_sum(const Vec<T>& x) {
  T sum = 0;
  for (int64_t i = 0; i < kWidth<T>; ++i) sum += x[i];
  return sum;
}

// sum_i a[i] * b[i] over n elements, n a multiple of kWidth<T>.
template <typename T>
inline T dot(const T* a, const T* b, int64_t n) {
  Vec<T> acc{};
  for (int64_t i = 0; i < n; i += kWidth<T>) acc += load<T>(a + i) * load<T>(b + i);
  return horizontal_sum<T>(acc);
}

// sum_i a[i] over n elements, n a multiple of kWidth<T>.
template <typename T>
inline T sum(const T* a, int64_t n) {
  Vec<T> acc{};
  for (int64_t i = 0; i < n; i += kWidth<T>) acc += load<T>(a + i);
  return horizontal_sum<T>(acc);
}

// C[MR x NV vectors] (+)= A[MR x depth] B[depth x NV vectors].
template <int MR, int NV, typename T>
inline void block(int64_t depth, const T* __restrict a, int64_t lda, const T* __restrict b, int64_t ldb,
                  T* __restrict c, int64_t ldc, bool accumulate) {
  constexpr int64_t kW = kWidth<T>;
  Vec<T> acc[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) acc[i][v] = accumulate ? load<T>(c + i * ldc + v * kW) : Vec<T>{};
  }
  for (int64_t p = 0; p < depth; ++p) {
    Vec<T> bp[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) bp[v] = load<T>(b + p * ldb + v * kW);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const T ai = a[i * lda + p];
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[i][v] += ai * bp[v];
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) store<T>(c + i * ldc + v * kW, acc[i][v]);
  }
}

// block<MR> for the last rows < kRowBlock of a product, one register block of `rows` rows.
template <int MR, int NV, typename T>
inline void block_rows(int64_t rows, int64_t depth, const T* a, int64_t lda, const T* b, int64_t ldb, T* c,
                       int64_t ldc, bool accumulate) {
  if constexpr (MR > 1) {
    if (rows < MR) return block_rows<MR - 1, NV, T>(rows, depth, a, lda, b, ldb, c, ldc, accumulate);
  }
  block<MR, NV, T>(depth, a, lda, b, ldb, c, ldc, accumulate);
}

// C[m x n] (+)= A[m x depth] B[depth x n], n a multiple of kColBlock<T>; `shape` skips the
// blocks (down to single vectors of columns) that the causal mask makes unnecessary (see Shape).
// After every register block it lets `ahead` (when given) ask for a few more lines.
template <typename T>
void gemm(int64_t m, int64_t n, int64_t depth, const T* a, int64_t lda, const T* b, int64_t ldb, T* c,
          int64_t ldc, bool accumulate, Shape shape = Shape::kFull, PrefetchQueue* ahead = nullptr) {
  constexpr int64_t kW = kWidth<T>;
  for (int64_t i0 = 0; i0 < m; i0 += kRowBlock) {
    const int64_t rows = std::min<int64_t>(kRowBlock, m - i0);
    const int64_t i_end = i0 + rows;
    int64_t j_begin = 0, j_end = n, p_begin = 0, p_end = depth;
    if (shape == Shape::kLowerOut) j_end = std::min(n, (i_end + kW - 1) / kW * kW);
    if (shape == Shape::kUpperOut) j_begin = i0 / kW * kW;
    if (shape == Shape::kLowerA) p_end = std::min(depth, i_end);
    if (shape == Shape::kUpperA) p_begin = i0;
    const T* a_rows = a + i0 * lda + p_begin;
    const T* b_rows = b + p_begin * ldb;
    for (int64_t j = j_begin; j < j_end; j += 2 * kW) {
      T* c_block = c + i0 * ldc + j;
      if (j + kW == j_end) {  // one vector of columns is left
        block_rows<kRowBlock, 1, T>(rows, p_end - p_begin, a_rows, lda, b_rows + j, ldb, c_block, ldc, accumulate);
      } else {
        block_rows<kRowBlock, 2, T>(rows, p_end - p_begin, a_rows, lda, b_rows + j, ldb, c_block, ldc, accumulate);
      }
      if (ahead != nullptr) ahead->request();
    }
  }
}

}  // namespace
}  // namespace lintf::tile
