// Loads of the chunked CUDA kernels' backward operands that every op shares
// ({causal,decayed,gla}/cuda/chunk_backward.cuh).
#pragma once

#include "common/cuda/chunk_grid.cuh"

namespace lintf {
namespace chunk {

using tile::padded_ld;

// Loads one value tile's columns of the chunk's rows of v and grad ((heads * n, m) row-major, from row
// row0) as operands, both exact in their type.
template <typename T>
__device__ void load_value_tile(const T* v_rows, const T* grad_rows, const Dims& d, int64_t row0, int rows,
                                int value_tile, T* v, T* g) {
  const int m0 = value_tile * d.mt, cols = d.tile_cols(value_tile), ldv = padded_ld<T>(d.mt);
  const float* no_scale = nullptr;
  tile::load_tile(v_rows + row0 * d.m + m0, d.m, rows, cols, no_scale, v, ldv, kChunk, d.mt);
  tile::load_tile(grad_rows + row0 * d.m + m0, d.m, rows, cols, no_scale, g, ldv, kChunk, d.mt);
}

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
