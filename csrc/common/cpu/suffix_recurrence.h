// The reverse sweep's dv and dk from one update of the suffix state R (AVX-512, fp32).
//
// For positions t of a chunk, from the last to the first, with R_t = R_{t+1} + q_t g_t^T (C x M):
//   dv_t = R_t^T k_t   (a broadcast k element times a row of R: lanes run along M)
//   dk_t = R_t v_t     (a row of R times v_t, summed across the lanes)
// tile::recurrence computes each of them from a state of its own (R for dv, R^T for dk), so R is
// updated twice per position. Here one 8 x 2-vector tile of R serves both: per step 16 FMAs update
// it, 16 give dv and 16 give dk's partial sums, 48 instead of 64. The partial sums (one vector
// per row and position) are added up over the column blocks in L1 and summed across their lanes
// once per row tile and chunk: 16 vectors at a time become one vector of 16 sums in 15 additions
// and 30 shuffles, off the FMA ports on most cores.
//
// Included inside a vector path's target region (causal/cpu/chunk.h, decayed/cpu/sweeps.h); internal
// linkage. Only the AVX-512 fp32 instantiation is used (kMerged), where the 32 registers hold the
// tile, its two partial sums of dv and the rows of g and v.
#pragma once

#include "common/cpu/recurrence.h"

namespace lintf::tile {
namespace {

// Whether the reverse sweep uses merged_suffix_recurrence for T on this vector path.
template <typename T>
constexpr bool kMerged = kVectorBytes == 64 && sizeof(T) == 4;

// Lanes of the sum of x[0..15] (16-lane vectors), lane i the sum of x[i]'s lanes.
template <typename T>
inline Vec<T> lane_sums16(const Vec<T>* x) {
  static_assert(kWidth<T> == 16);
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
}

// One tile of R (8 rows from `state`, two vectors wide) over the chunk's `rows` positions in
// reverse: adds its share of dv_t to dv's rows (with `accumulate`) and of dk_t's partial sums to
// `partial` (kChunk x 8 vectors; with `accumulate_partial`).
template <typename T>
inline void merged_tile(int64_t rows, const T* __restrict q, const T* __restrict k, int64_t ld_key,
                        const T* __restrict g, const T* __restrict v, int64_t ld_value, T* __restrict state,
                        T* __restrict dv, bool accumulate, T* __restrict partial, bool accumulate_partial,
                        PrefetchQueue* ahead) {
  constexpr int64_t kW = kWidth<T>;
  constexpr int kRows = 8, NV = 2;
  Vec<T> tile[kRows][NV];
#pragma GCC unroll 8
  for (int i = 0; i < kRows; ++i) {
#pragma GCC unroll 2
    for (int c = 0; c < NV; ++c) tile[i][c] = load<T>(state + i * ld_value + c * kW);
  }
  for (int64_t t = rows - 1; t >= 0; --t) {
    Vec<T> g_row[NV], v_row[NV], sum[2][NV];
    T* dv_row = dv + t * ld_value;
#pragma GCC unroll 2
    for (int c = 0; c < NV; ++c) {
      g_row[c] = load<T>(g + t * ld_value + c * kW);
      v_row[c] = load<T>(v + t * ld_value + c * kW);
      sum[0][c] = accumulate ? load<T>(dv_row + c * kW) : Vec<T>{};
      sum[1][c] = Vec<T>{};
    }
    T* part = partial + t * kRows * kW;
#pragma GCC unroll 8
    for (int i = 0; i < kRows; ++i) {
      const T q_i = q[t * ld_key + i], k_i = k[t * ld_key + i];
#pragma GCC unroll 2
      for (int c = 0; c < NV; ++c) tile[i][c] += q_i * g_row[c];
#pragma GCC unroll 2
      for (int c = 0; c < NV; ++c) sum[i % 2][c] += k_i * tile[i][c];
      Vec<T> dk_part = tile[i][0] * v_row[0] + tile[i][1] * v_row[1];
      if (accumulate_partial) dk_part += load<T>(part + i * kW);
      store<T>(part + i * kW, dk_part);
    }
#pragma GCC unroll 2
    for (int c = 0; c < NV; ++c) store<T>(dv_row + c * kW, sum[0][c] + sum[1][c]);
    if (ahead != nullptr) ahead->request();
  }
#pragma GCC unroll 8
  for (int i = 0; i < kRows; ++i) {
#pragma GCC unroll 2
    for (int c = 0; c < NV; ++c) store<T>(state + i * ld_value + c * kW, tile[i][c]);
  }
}

// dv (rows x value_width) and dk (rows x key_width) of a chunk's positions [0, rows), from the
// suffix state R (key_width x value_width) after the chunk, left holding R before it. q, k:
// rows x key_width; g, v: rows x value_width; partial: kChunk x 8 x 16 floats of scratch.
template <typename T>
void merged_suffix_recurrence(int64_t rows, const T* q, const T* k, int64_t key_width, const T* g, const T* v,
                              int64_t value_width, T* state, T* dv, T* dk, T* partial, PrefetchQueue* ahead) {
  constexpr int64_t kW = kWidth<T>;
  for (int64_t i = 0; i < key_width; i += 8) {
    for (int64_t j = 0; j < value_width; j += 2 * kW) {
      merged_tile<T>(rows, q + i, k + i, key_width, g + j, v + j, value_width, state + i * value_width + j, dv + j,
                  i > 0, partial, j > 0, ahead);
    }
    for (int64_t t = 0; t < rows; t += 2) {  // two positions' 8 rows: one vector of 16 sums
      Vec<T> x[16];
#pragma GCC unroll 16
      for (int r = 0; r < 16; ++r) x[r] = t + r / 8 < rows ? load<T>(partial + (t * 8 + r) * kW) : Vec<T>{};
      const Vec<T> sums = lane_sums16<T>(x);
      std::memcpy(dk + t * key_width + i, &sums, 8 * sizeof(T));
      if (t + 1 < rows) std::memcpy(dk + (t + 1) * key_width + i, reinterpret_cast<const T*>(&sums) + 8,
                                    8 * sizeof(T));
    }
  }
}

}  // namespace
}  // namespace lintf::tile
