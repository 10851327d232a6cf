// What the CUDA delta rule's backward sweep reads, in one kernel per (head, chunk) (notation: chunk.cuh, aten.h):
//   P = (Q K^T) o D,  Qe = diag(e) Q,  dO = scale grad_out (in chunks),  Rt = T^T F,  R0 = T^T P^T dO,
// from q, k, grad_out in the inputs' type and the chunk kernel's b, T and F, all written fp32 to
// (heads, chunks, kChunk, .) arrays (P and dO are read again by the gradients' ATen part). fp32 tiles,
// 3xTF32 products (TF32 where torch allows it), as in chunk.cuh.
#pragma once

#include "common/cuda/chunk_grid.cuh"
#include "common/cuda/chunk_tiles.cuh"

namespace lintf {
namespace delta_backward {

using chunk::Block;
using chunk::Dims;
using tile::Causal;
using tile::kChunk;
using tile::padded_ld;

template <typename T>
struct OperandArgs {
  const T *q, *k, *grad;                 // (heads, n, c) twice, (heads, n, m)
  const float *cumulative, *tinv, *fk;   // b (heads, chunks, kChunk); T (.., kChunk, kChunk); F (.., kChunk, c)
  float *p, *qe, *dos, *r0, *rt;         // (heads, chunks, kChunk, kChunk / c / m / m / c)
  float scale;
};

template <typename T>
struct OperandLayout {
  float *q, *k, *p, *t, *g, *x, *rows;
  size_t bytes;
  __host__ __device__ OperandLayout(int cp, int mt, unsigned char* base = nullptr) {
    tile::Carve carve{base};
    q = carve.take<float>(kChunk * padded_ld<float>(cp));      // Q, then F
    k = carve.take<float>(kChunk * padded_ld<float>(cp));      // K, then Rt
    p = carve.take<float>(kChunk * padded_ld<float>(kChunk));  // P
    t = carve.take<float>(kChunk * padded_ld<float>(kChunk));  // T
    g = carve.take<float>(kChunk * padded_ld<float>(mt));      // a value tile of dO, then of R0
    x = carve.take<float>(kChunk * padded_ld<float>(mt));      // P^T dO
    rows = carve.take<float>(2 * kChunk);                      // b, e
    bytes = carve.bytes;
  }
};

template <typename T, bool Split>
__global__ void __launch_bounds__(tile::kThreads) delta_backward_operands_kernel(OperandArgs<T> a, Dims d) {
  const auto sh = chunk::shared_tiles<OperandLayout<T>>(d.cp, d.mt);
  const Block blk(d, false);
  float *b = sh.rows, *e = b + kChunk;
  const int ldk = padded_ld<float>(d.cp), ldp = padded_ld<float>(kChunk), ldg = padded_ld<float>(d.mt);
  const int64_t first = blk.state * kChunk;  // the chunk's first row in the (heads, chunks, kChunk, .) arrays
  for (int t = threadIdx.x; t < kChunk; t += blockDim.x) b[t] = a.cumulative[first + t], e[t] = expf(b[t]);
  chunk::load_features(a.q, d, blk, sh.q);
  chunk::load_features(a.k, d, blk, sh.k);
  tile::load_tile(a.tinv + first * kChunk, kChunk, kChunk, kChunk, static_cast<const float*>(nullptr), sh.t, ldp,
                  kChunk, kChunk);
  __syncthreads();
  tile::block_mma<float, Split, true, false>(sh.q, ldk, sh.k, ldk, sh.p, ldp, kChunk, kChunk, d.cp,
                                             Causal::kLowerOutput, 0.f, 1.f);
  for (int i = threadIdx.x; i < kChunk * d.c; i += blockDim.x) {  // Qe
    a.qe[(first + i / d.c) * d.c + i % d.c] = e[i / d.c] * sh.q[(i / d.c) * ldk + i % d.c];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kChunk * kChunk; i += blockDim.x) {  // P, zero above the diagonal
    const int t = i / kChunk, s = i % kChunk;
    const float value = s > t ? 0.f : sh.p[t * ldp + s] * expf(b[t] - b[s]);
    sh.p[t * ldp + s] = value;
    a.p[first * kChunk + i] = value;
  }
  tile::load_tile(a.fk + first * d.c, d.c, kChunk, d.c, static_cast<const float*>(nullptr), sh.q, ldk, kChunk, d.cp);
  __syncthreads();
  // Rt = T^T F, T read as a column-major operand (T^T is upper triangular, as is P^T below)
  tile::block_mma<float, Split, false, true>(sh.t, ldp, sh.q, ldk, sh.k, ldk, kChunk, d.cp, kChunk, Causal::kUpperA,
                                             0.f, 1.f);
  __syncthreads();
  tile::store_tile(sh.k, ldk, kChunk, d.c, a.rt + first * d.c, d.c);
  for (int tile_index = 0; tile_index < d.value_tiles; ++tile_index) {  // dO and R0 = T^T (P^T dO), a tile a time
    const int m0 = tile_index * d.mt, cols = d.tile_cols(tile_index);
    __syncthreads();  // g and x are free
    tile::load_tile(a.grad + blk.row0 * d.m + m0, d.m, blk.rows, cols, static_cast<const float*>(nullptr), sh.g,
                    ldg, kChunk, d.mt);
    __syncthreads();
    for (int i = threadIdx.x; i < kChunk * d.mt; i += blockDim.x) sh.g[(i / d.mt) * ldg + i % d.mt] *= a.scale;
    __syncthreads();
    tile::store_tile(sh.g, ldg, kChunk, cols, a.dos + first * d.m + m0, d.m);
    tile::block_mma<float, Split, false, true>(sh.p, ldp, sh.g, ldg, sh.x, ldg, kChunk, d.mt, kChunk,
                                               Causal::kUpperA, 0.f, 1.f);
    __syncthreads();
    tile::block_mma<float, Split, false, true>(sh.t, ldp, sh.x, ldg, sh.g, ldg, kChunk, d.mt, kChunk,
                                               Causal::kUpperA, 0.f, 1.f);
    __syncthreads();
    tile::store_tile(sh.g, ldg, kChunk, cols, a.r0 + first * d.m + m0, d.m);
  }
}

}  // namespace delta_backward
}  // namespace lintf
