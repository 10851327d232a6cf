// Loads of the chunked CUDA kernels' operands that every op shares ({causal,decayed,gla}/cuda/chunk*.cuh,
// common/cuda/chunk_added.cuh): the chunk's rows of a (heads * n, .) row-major input and a chunk state's block.
#pragma once

#include "common/cuda/chunk_grid.cuh"

namespace lintf {
namespace chunk {

using tile::padded_ld;

// dst (kChunk x cp of Out) <- the chunk's rows of x ((heads * n, c) row-major), each times row_scale[t]
// when given, zeros past the chunk's rows and c.
template <typename In, typename Out>
__device__ void load_features(const In* x, const Dims& d, const Block& b, Out* dst, const float* row_scale = nullptr) {
  tile::load_tile(x + b.row0 * d.c, d.c, b.rows, d.c, row_scale, dst, padded_ld<Out>(d.cp), kChunk, d.cp);
}

// dst (kChunk x mt) <- the chunk's rows of y ((heads * n, m) row-major) in value tile `value_tile`'s
// columns, exact in its type; zeros past them.
template <typename T>
__device__ void load_values(const T* y, const Dims& d, const Block& b, int value_tile, T* dst) {
  tile::load_tile(y + b.row0 * d.m + value_tile * d.mt, d.m, b.rows, d.tile_cols(value_tile),
                  static_cast<const float*>(nullptr), dst, padded_ld<T>(d.mt), kChunk, d.mt);
}

// Both of the chunk's (kChunk x mt) value-tile operands of the backward: v and the output's gradient.
template <typename T>
__device__ void load_value_tile(const T* v_rows, const T* grad_rows, const Dims& d, const Block& b, int value_tile,
                                T* v, T* g) {
  load_values(v_rows, d, b, value_tile, v);
  load_values(grad_rows, d, b, value_tile, g);
}

// For load_state_tile: a state that enters the tensor cores whole (no rounding remainder kept).
template <typename T>
constexpr T* kNoLow = nullptr;

// Loads the (c x value tile) block of chunk state `state` (fp32 (c, m) matrices in global memory) as an
// operand through the fp32 staging tile f; with a 16-bit T and `low`, its rounding remainder goes there
// (tile::to_operand). Returns its scale.
template <typename T>
__device__ float load_state_tile(const float* states, const Dims& d, int64_t state, int value_tile, T* s, T* low,
                                 float* f, int ldf, float* scratch) {
  tile::load_tile(states + state * int64_t(d.c) * d.m + value_tile * d.mt, d.m, d.c, d.tile_cols(value_tile),
                  static_cast<const float*>(nullptr), f, ldf, d.cp, d.mt);
  __syncthreads();
  const float scale = tile::to_operand(f, ldf, s, padded_ld<T>(d.mt), d.cp, d.mt, scratch,
                                       std::is_same_v<T, float> ? nullptr : low);
  __syncthreads();
  return scale;
}

}  // namespace chunk
}  // namespace lintf
