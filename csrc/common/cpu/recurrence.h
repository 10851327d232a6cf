// The recurrence of the causal and decayed products on one chunk, with a tile of the running state in
// registers (the decayed product scales the rows it passes in: decayed/cpu/sweeps.h).
//
// For positions t of a chunk, in order or in reverse:
//   state += key_t value_t^T   (key_width x value_width)
//   out_t  = query_t^T state    (value_width; the state includes position t)
// which is the forward (query q, key k, value v, state S), the dq sweep (g, v, k and S^T) and both
// halves of the reverse sweep (k, q, g and R for dv; v, g, q and R^T for dk; in fp32
// suffix_recurrence.h computes both from one update of R) of the CPU ops. It
// executes the minimal 4 * key_width * value_width flops per position, against the 5 to 6.5 of a
// chunked method (a masked intra-chunk product beside the inter-chunk one).
//
// The state is cut into tiles of kStateRows rows x 2 vectors. A tile stays in registers while it
// visits every position of the chunk, adding its rows' share to each output row (kept in the
// workspace, so in L1); the state is read and written once per chunk, not per position. Each step
// is 4 * kStateRows FMAs on a broadcast key or query element and two vectors of a value row: with
// AVX-512 an 8 x 2 tile holds 16 of the 32 registers (a 4 x 4 tile loads and stores twice the
// output vectors per FMA: at N=4096 its forward was 10-15% slower); with 16 registers (AVX2, SSE)
// the tile is 4 x 2.
//
// Included inside a vector path's target region (causal/cpu/chunk.h, decayed/cpu/sweeps.h); internal linkage.
#pragma once

#include "common/cpu/tile.h"

namespace lintf::tile {
namespace {

constexpr int kStateRows = kVectorBytes == 64 ? 8 : 4;
// How often the tile asks `ahead` for lines of a later chunk: after every step where the registers
// leave room for the queue's bookkeeping (AVX-512: 4-9% faster backward than once per tile),
// else once per tile (with 16 registers a request per step cost AVX2 15% of its forward).
constexpr bool kRequestEachStep = kVectorBytes == 64;

// One state tile (kStateRows rows of `state`, two vectors wide) over `rows` positions. out rows
// share value's leading dimension; with `accumulate` the tile's share is added to them.
template <typename T>
inline void recurrence_tile(int64_t rows, bool reverse, const T* __restrict query, const T* __restrict key,
                            int64_t ld_key, const T* __restrict value, int64_t ld_value, T* __restrict state,
                            int64_t ld_state, T* __restrict out, bool accumulate, PrefetchQueue* ahead) {
  constexpr int64_t kW = kWidth<T>;
  constexpr int NV = 2;
  Vec<T> tile[kStateRows][NV];
#pragma GCC unroll 8
  for (int i = 0; i < kStateRows; ++i) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) tile[i][v] = load<T>(state + i * ld_state + v * kW);
  }
  for (int64_t step = 0; step < rows; ++step) {
    const int64_t t = reverse ? rows - 1 - step : step;
    T* out_row = out + t * ld_value;
    Vec<T> value_row[NV], sum[2][NV];  // two partial sums per vector: two chains of kStateRows / 2 FMAs
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      value_row[v] = load<T>(value + t * ld_value + v * kW);
      sum[0][v] = accumulate ? load<T>(out_row + v * kW) : Vec<T>{};
      sum[1][v] = Vec<T>{};
    }
#pragma GCC unroll 8
    for (int i = 0; i < kStateRows; ++i) {
      const T key_i = key[t * ld_key + i];
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) tile[i][v] += key_i * value_row[v];
    }
#pragma GCC unroll 8
    for (int i = 0; i < kStateRows; ++i) {
      const T query_i = query[t * ld_key + i];
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) sum[i % 2][v] += query_i * tile[i][v];
    }
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) store<T>(out_row + v * kW, sum[0][v] + sum[1][v]);
    if (kRequestEachStep && ahead != nullptr) ahead->request();
  }
  if (!kRequestEachStep && ahead != nullptr) ahead->request();
#pragma GCC unroll 8
  for (int i = 0; i < kStateRows; ++i) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) store<T>(state + i * ld_state + v * kW, tile[i][v]);
  }
}

// The recurrence over positions [0, rows) of a chunk (from rows - 1 down to 0 with `reverse`).
// query and key: rows x key_width (leading dimension key_width); value and out: rows x value_width;
// state: key_width x value_width, left holding the state after the chunk. key_width and
// value_width are multiples of two vectors (the padded widths of Dims), so of kStateRows too.
// While the tiles run, `ahead` (when given) asks for a few lines of a later chunk at a time.
template <typename T>
void recurrence(int64_t rows, bool reverse, const T* query, const T* key, int64_t key_width, const T* value,
                int64_t value_width, T* state, T* out, PrefetchQueue* ahead) {
  for (int64_t j = 0; j < value_width; j += kColBlock<T>) {
    for (int64_t i = 0; i < key_width; i += kStateRows) {
      recurrence_tile<T>(rows, reverse, query + i, key + i, key_width, value + j, value_width,
                         state + i * value_width + j, value_width, out + j, i > 0, ahead);
    }
  }
}

}  // namespace
}  // namespace lintf::tile
