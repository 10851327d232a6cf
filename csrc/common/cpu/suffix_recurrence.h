// The reverse sweep's dv and dk from one update of the suffix state R (fp32, every vector path).
//
// For positions t of a chunk, from the last to the first, with R_t = R_{t+1} + q_t g_t^T (C x M):
//   dv_t = R_t^T k_t   (a broadcast k element times a row of R: lanes run along M)
//   dk_t = R_t v_t     (a row of R times v_t, summed across the lanes)
// tile::recurrence computes each of them from a state of its own (R for dv, R^T for dk), so R is
// updated twice per position. Here one kStateRows x 2-vector tile of R serves both: per step a
// third of the FMAs update it, a third give dv and a third give dk's partial sums, 6 C M flops
// per position instead of 8. The partial sums (one vector per row and position) are added up over
// the column blocks in L1 and summed across their lanes once per row tile and chunk: kWidth vectors
// at a time become one vector of kWidth sums (log2(kWidth) rounds of shuffles and additions), off
// the FMA ports on most cores.
//
// Registers: with AVX-512 (32) the 8 x 2 tile, two partial sums of dv and the rows of g and v; with
// 16 (AVX2, SSE) the 4 x 2 tile, one partial sum of dv, and g and v read from L1 by the FMAs.
//
// Included inside a vector path's target region (causal/cpu/chunk.h, decayed/cpu/sweeps.h); internal
// linkage. fp64 keeps the two recurrences (kMerged): its lanes are half as many, and it serves the
// float64 checks, which then test the plain recurrence on every path.
#pragma once

#include "common/cpu/recurrence.h"

namespace lintf::tile {
namespace {

// Whether the reverse sweep uses merged_suffix_recurrence for T on this vector path.
template <typename T>
constexpr bool kMerged = sizeof(T) == 4;

// Rows of R per merged tile; positions whose dk sums one vector of lane sums holds.
constexpr int kMergedRows = kStateRows;
template <typename T>
constexpr int kSumPositions = kWidth<T> / kMergedRows;

// One vector whose lane i is the sum of x[i]'s lanes, for kWidth<T> vectors x: each round adds the
// two halves of a pair of vectors, keeping the pair's partials side by side.
template <typename T>
inline Vec<T> lane_sums(const Vec<T>* x) {
  if constexpr (kWidth<T> == 16) {
    Vec<T> a[8], b[4], c[2];
#pragma GCC unroll 8
    for (int p = 0; p < 8; ++p) {  // halves: a[p] = 8 partials of x[2p], then 8 of x[2p+1]
      a[p] = __builtin_shufflevector(x[2 * p], x[2 * p + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
             __builtin_shufflevector(x[2 * p], x[2 * p + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    }
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {  // quarters: 4 partials of each of 4 vectors
      b[p] = __builtin_shufflevector(a[2 * p], a[2 * p + 1], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) +
             __builtin_shufflevector(a[2 * p], a[2 * p + 1], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
    }
#pragma GCC unroll 2
    for (int p = 0; p < 2; ++p) {  // pairs: 2 partials of each of 8 vectors
      c[p] = __builtin_shufflevector(b[2 * p], b[2 * p + 1], 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29) +
             __builtin_shufflevector(b[2 * p], b[2 * p + 1], 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
    }
    return __builtin_shufflevector(c[0], c[1], 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30) +
           __builtin_shufflevector(c[0], c[1], 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  } else if constexpr (kWidth<T> == 8) {
    Vec<T> a[4], b[2];
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {  // halves: 4 partials of x[2p], then 4 of x[2p+1]
      a[p] = __builtin_shufflevector(x[2 * p], x[2 * p + 1], 0, 1, 2, 3, 8, 9, 10, 11) +
             __builtin_shufflevector(x[2 * p], x[2 * p + 1], 4, 5, 6, 7, 12, 13, 14, 15);
    }
#pragma GCC unroll 2
    for (int p = 0; p < 2; ++p) {  // pairs: 2 partials of each of 4 vectors
      b[p] = __builtin_shufflevector(a[2 * p], a[2 * p + 1], 0, 1, 4, 5, 8, 9, 12, 13) +
             __builtin_shufflevector(a[2 * p], a[2 * p + 1], 2, 3, 6, 7, 10, 11, 14, 15);
    }
    return __builtin_shufflevector(b[0], b[1], 0, 2, 4, 6, 8, 10, 12, 14) +
           __builtin_shufflevector(b[0], b[1], 1, 3, 5, 7, 9, 11, 13, 15);
  } else {
    static_assert(kWidth<T> == 4, "lane_sums takes 4, 8 or 16 lanes");
    const Vec<T> a0 = __builtin_shufflevector(x[0], x[1], 0, 1, 4, 5) + __builtin_shufflevector(x[0], x[1], 2, 3, 6, 7);
    const Vec<T> a1 = __builtin_shufflevector(x[2], x[3], 0, 1, 4, 5) + __builtin_shufflevector(x[2], x[3], 2, 3, 6, 7);
    return __builtin_shufflevector(a0, a1, 0, 2, 4, 6) + __builtin_shufflevector(a0, a1, 1, 3, 5, 7);
  }
}

// One tile of R (kMergedRows rows from `state`, two vectors wide) over the chunk's `rows` positions
// in reverse: adds its share of dv_t to dv's rows (with `accumulate`) and of dk_t's partial sums to
// `partial` (kChunk x kMergedRows vectors; with `accumulate_partial`).
template <typename T>
inline void merged_tile(int64_t rows, const T* __restrict q, const T* __restrict k, int64_t ld_key,
                        const T* __restrict g, const T* __restrict v, int64_t ld_value, T* __restrict state,
                        T* __restrict dv, bool accumulate, T* __restrict partial, bool accumulate_partial,
                        PrefetchQueue* ahead) {
  constexpr int64_t kW = kWidth<T>;
  constexpr int kRows = kMergedRows, NV = 2, kChains = kVectorBytes == 64 ? 2 : 1;
  Vec<T> tile[kRows][NV];
#pragma GCC unroll 8
  for (int i = 0; i < kRows; ++i) {
#pragma GCC unroll 2
    for (int c = 0; c < NV; ++c) tile[i][c] = load<T>(state + i * ld_value + c * kW);
  }
  for (int64_t t = rows - 1; t >= 0; --t) {
    Vec<T> g_row[NV], v_row[NV], sum[kChains][NV];
    T* dv_row = dv + t * ld_value;
#pragma GCC unroll 2
    for (int c = 0; c < NV; ++c) {
      g_row[c] = load<T>(g + t * ld_value + c * kW);
      v_row[c] = load<T>(v + t * ld_value + c * kW);
      sum[0][c] = accumulate ? load<T>(dv_row + c * kW) : Vec<T>{};
      for (int chain = 1; chain < kChains; ++chain) sum[chain][c] = Vec<T>{};
    }
    T* part = partial + t * kRows * kW;
#pragma GCC unroll 8
    for (int i = 0; i < kRows; ++i) {
      const T q_i = q[t * ld_key + i], k_i = k[t * ld_key + i];
#pragma GCC unroll 2
      for (int c = 0; c < NV; ++c) tile[i][c] += q_i * g_row[c];
#pragma GCC unroll 2
      for (int c = 0; c < NV; ++c) sum[i % kChains][c] += k_i * tile[i][c];
      Vec<T> dk_part = tile[i][0] * v_row[0] + tile[i][1] * v_row[1];
      if (accumulate_partial) dk_part += load<T>(part + i * kW);
      store<T>(part + i * kW, dk_part);
    }
#pragma GCC unroll 2
    for (int c = 0; c < NV; ++c) {
      Vec<T> total = sum[0][c];
      for (int chain = 1; chain < kChains; ++chain) total += sum[chain][c];
      store<T>(dv_row + c * kW, total);
    }
    if (kRequestEachStep && ahead != nullptr) ahead->request();
  }
  if (!kRequestEachStep && ahead != nullptr) ahead->request();
#pragma GCC unroll 8
  for (int i = 0; i < kRows; ++i) {
#pragma GCC unroll 2
    for (int c = 0; c < NV; ++c) store<T>(state + i * ld_value + c * kW, tile[i][c]);
  }
}

// dv (rows x value_width) and dk (rows x key_width) of a chunk's positions [0, rows), from the
// suffix state R (key_width x value_width) after the chunk, left holding R before it. q, k:
// rows x key_width; g, v: rows x value_width; partial: kChunk x kMergedRows vectors of scratch.
template <typename T>
void merged_suffix_recurrence(int64_t rows, const T* q, const T* k, int64_t key_width, const T* g, const T* v,
                              int64_t value_width, T* state, T* dv, T* dk, T* partial, PrefetchQueue* ahead) {
  constexpr int64_t kW = kWidth<T>;
  constexpr int kRows = kMergedRows, kPositions = kSumPositions<T>;
  for (int64_t i = 0; i < key_width; i += kRows) {
    for (int64_t j = 0; j < value_width; j += 2 * kW) {
      merged_tile<T>(rows, q + i, k + i, key_width, g + j, v + j, value_width, state + i * value_width + j, dv + j,
                     i > 0, partial, j > 0, ahead);
    }
    for (int64_t t = 0; t < rows; t += kPositions) {  // kPositions positions' rows: one vector of sums
      Vec<T> x[kW];
#pragma GCC unroll 16
      for (int r = 0; r < kW; ++r) x[r] = t + r / kRows < rows ? load<T>(partial + (t * kRows + r) * kW) : Vec<T>{};
      const Vec<T> sums = lane_sums<T>(x);
#pragma GCC unroll 4
      for (int p = 0; p < kPositions; ++p) {
        if (t + p < rows) std::memcpy(dk + (t + p) * key_width + i, reinterpret_cast<const T*>(&sums) + p * kRows, kRows * sizeof(T));
      }
    }
  }
}

}  // namespace
}  // namespace lintf::tile
