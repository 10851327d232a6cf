// The grid of the chunked CUDA kernels ({causal,decayed,gla}/cuda/chunk*.cuh, delta/cuda/sweeps.cuh): the
// problem's dimensions, which (head, chunk, value tile) a block owns, and the block's dynamic shared memory
// with the tiles each kernel's layout carves from it.
#pragma once

#include "common/cuda/tile.cuh"

namespace lintf {
namespace chunk {

using tile::kChunk;

// heads = B*H; c, m: feature and value sizes; cp: c padded to 16; mt: value columns per block (a
// multiple of 16); value_tiles = ceil(m / mt); chunks = ceil(n / kChunk).
struct Dims {
  int64_t heads, n;
  int c, m, cp, mt, chunks, value_tiles;

  __device__ int chunk_rows(int chunk) const {
    const int64_t left = n - int64_t(chunk) * kChunk;
    return left < kChunk ? static_cast<int>(left) : kChunk;
  }
  __device__ int tile_cols(int value_tile) const { return min(mt, m - value_tile * mt); }
};

// blockIdx.x enumerates (head, chunk) or (head, chunk, value tile), the value tile fastest. Where the
// block's chunk lies: its rows (the first, row0, in (heads * n) row-major inputs), its state (in
// (heads, chunks, ...) arrays) and its value tile's columns (the first, m0; the whole of tile 0 for
// blocks that loop over the value tiles).
struct Block {
  int64_t head;
  int chunk, value_tile;
  int rows, cols, m0;
  int64_t row0, state;
  __device__ Block(const Dims& d, bool per_value_tile) {
    int64_t index = blockIdx.x;
    value_tile = per_value_tile ? static_cast<int>(index % d.value_tiles) : 0;
    if (per_value_tile) index /= d.value_tiles;
    chunk = static_cast<int>(index % d.chunks);
    head = index / d.chunks;
    rows = d.chunk_rows(chunk);
    cols = d.tile_cols(value_tile);
    m0 = value_tile * d.mt;
    state = head * d.chunks + chunk;
    row0 = head * d.n + int64_t(chunk) * kChunk;
  }
};

// The block's dynamic shared memory, one array for every chunked kernel (the CPU emulation defines it).
__device__ __forceinline__ unsigned char* shared_memory() {
  extern __shared__ __align__(128) unsigned char smem[];
  return smem;
}

// The tiles of Layout (a struct of pointers carved by tile::Carve from (cp, mt, base)) in the block's
// shared memory: the start of every chunked kernel.
template <typename Layout>
__device__ __forceinline__ Layout shared_tiles(int cp, int mt) {
  return Layout(cp, mt, shared_memory());
}

}  // namespace chunk
}  // namespace lintf
