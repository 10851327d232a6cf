// Backward kernels of the chunked CUDA causal product (forward and notation: chunk.cuh).
//
// With r = 1 / denominator and gd = -(grad_out . out) r when normalize (r = 1, gd = 0 otherwise) and
// G = diag(r) grad_out, every gradient is a causal product again. Within chunk c, with the forward's
// states S_c, z_c before the chunk and the reverse sweep's dS_c = dS_final + sum_{c' > c} Q_c'^T G_c',
// dz_c = dz_final + sum_{c' > c} Q_c'^T gd_c' (chunk_state_kernel and a reverse state_scan_kernel), and
// D = mask(G V^T + gd 1^T), A = mask(Q K^T):
//   dq_c = D K_c + G S_c^T + gd z_c^T           (chunk_dq_kernel)
//   dk_c = D^T Q_c + V_c dS_c^T + 1 dz_c^T      (chunk_dkv_kernel)
//   dv_c = A^T G + K_c dS_c                     (chunk_dkv_kernel)
// grad_out enters the tensor cores as it is (exact in its own type) and r is applied in fp32 after the
// products: D = mask(diag(r) (grad V^T) + gd 1^T) cancels its two terms in fp32 (they cancel exactly
// where all values agree), G S^T = diag(r) (grad S^T), and A^T G = (diag(r) A)^T grad. Across chunks,
// G S^T cancels against gd z^T and V dS^T against dz in the same way, so S and dS enter those two
// products as a 16-bit head plus its rounding remainder (fp32 states would otherwise lose the result).
// D and the k and q gradients contract over all value columns, so these kernels run one block per
// (head, chunk) and loop over the value tiles, accumulating in fp32 shared memory.
#pragma once

#include "causal/cuda/chunk.cuh"
#include "common/cuda/chunk_tiles.cuh"

namespace lintf {
namespace chunk {

template <typename T>
struct BackwardArgs {
  const T *q, *k, *v, *grad;     // (heads, n, c), (heads, n, c), (heads, n, m), (heads, n, m)
  const float* inv_denominator;  // (heads, n) r, or null (one)
  const float* neg_grad_dot_out; // (heads, n) -(grad_out . out) (gd = r times it), or null (zero)
  const float *kv, *z;           // forward states before each chunk; z is read only with gd
  const float *dkv, *dz;         // reverse-sweep states after each chunk
  T *dq, *dk, *dv;
};

// 16-bit operands carry the states of the cancelling products as head + remainder; fp32 ones use 3xTF32.
template <typename T>
constexpr bool kSplitStates = !std::is_same_v<T, float>;


// Per row of the chunk: r and gd (zeros beyond its rows); per feature: a state row (zeros when null).
// Each thread fills the gd entries of the r entries it wrote, so no barrier is needed in between.
template <typename T>
__device__ void load_vectors(const BackwardArgs<T>& args, const Dims& d, const Block& b, const float* state_row,
                             float* r, float* gd, float* feature) {
  const int64_t row0 = b.row0;
  const int rows = b.rows;
  for (int t = threadIdx.x; t < kChunk; t += blockDim.x) {
    r[t] = t >= rows ? 0.f : args.inv_denominator != nullptr ? args.inv_denominator[row0 + t] : 1.f;
    gd[t] = args.neg_grad_dot_out != nullptr && t < rows ? r[t] * args.neg_grad_dot_out[row0 + t] : 0.f;
  }
  for (int i = threadIdx.x; i < d.cp; i += blockDim.x) feature[i] = state_row != nullptr && i < d.c ? state_row[i] : 0.f;
}

// The normaliser's per-row terms in one pass over grad_out and out (one warp per row, fp32 sums):
// inv_denominator = r = 1 / denominator and neg_grad_dot_out = -(grad_out . out), both (heads, n).
constexpr int kRowTermsThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kRowTermsThreads) row_terms_kernel(const float* denominator, const T* grad,
                                                                     const T* out, float* inv_denominator,
                                                                     float* neg_grad_dot_out, int64_t rows, int m) {
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  float sum = 0.f;
  if (row < rows)
    for (int j = lane; j < m; j += 32) sum += tile::to_float(grad[row * m + j]) * tile::to_float(out[row * m + j]);
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);  // every lane
  if (row < rows && lane == 0) {
    inv_denominator[row] = 1.f / denominator[row];
    neg_grad_dot_out[row] = -sum;
  }
}

template <typename T>
struct DqLayout {
  T *k, *v, *g, *s, *s_low, *d_op;
  float *d_acc, *dq, *f, *z, *r, *gd, *scratch;
  size_t bytes;
  __host__ __device__ DqLayout(int cp, int mt, unsigned char* base = nullptr) {
    tile::Carve carve{base};
    k = carve.take<T>(kChunk * padded_ld<T>(cp));
    v = carve.take<T>(kChunk * padded_ld<T>(mt));
    g = carve.take<T>(kChunk * padded_ld<T>(mt));
    s = carve.take<T>(cp * padded_ld<T>(mt));
    s_low = kSplitStates<T> ? carve.take<T>(cp * padded_ld<T>(mt)) : nullptr;
    d_op = carve.take<T>(kChunk * padded_ld<T>(kChunk));
    d_acc = carve.take<float>(kChunk * padded_ld<float>(kChunk));
    dq = carve.take<float>(kChunk * padded_ld<float>(cp));
    f = carve.take<float>(max(kChunk, cp) * padded_ld<float>(mt));
    z = carve.take<float>(cp);
    r = carve.take<float>(kChunk);
    gd = carve.take<float>(kChunk);
    scratch = carve.take<float>(tile::kWarps);
    bytes = carve.bytes;
  }
};

template <typename T, bool Split>
__global__ void __launch_bounds__(tile::kThreads) chunk_dq_kernel(BackwardArgs<T> args, Dims d) {
  const auto sh = shared_tiles<DqLayout<T>>(d.cp, d.mt);
  const Block b(d, false);
  const int ldk = padded_ld<T>(d.cp), ldv = padded_ld<T>(d.mt), ldd = padded_ld<T>(kChunk);
  const int ld_acc = padded_ld<float>(kChunk), ldq = padded_ld<float>(d.cp), ldf = padded_ld<float>(d.mt);

  load_features(args.k, d, b, sh.k);
  load_vectors(args, d, b, args.neg_grad_dot_out ? args.z + b.state * d.c : nullptr, sh.r, sh.gd, sh.z);
  for (int value_tile = 0; value_tile < d.value_tiles; ++value_tile) {
    __syncthreads();  // the previous tile's products are done with v, g, s and f
    load_value_tile(args.v, args.grad, d, b, value_tile, sh.v, sh.g);
    const float s_scale = load_state_tile(args.kv, d, b.state, value_tile, sh.s, sh.s_low, sh.f, ldf, sh.scratch);
    const float keep = value_tile > 0 ? 1.f : 0.f;
    // d_acc += grad V^T (kChunk x kChunk), dq += grad S^T (kChunk x cp): v and s read transposed
    tile::block_mma<T, Split, true, false>(sh.g, ldv, sh.v, ldv, sh.d_acc, ld_acc, kChunk, kChunk, d.mt, Causal::kNone,
                                           keep, 1.f);
    tile::block_mma<T, Split, true, false>(sh.g, ldv, sh.s, ldv, sh.dq, ldq, kChunk, d.cp, d.mt, Causal::kNone, keep,
                                           s_scale, sh.s_low);
  }
  __syncthreads();
  tile::causal_mask(sh.d_acc, ld_acc, kChunk, sh.r, sh.gd);
  for (int e = threadIdx.x; e < kChunk * d.cp; e += blockDim.x) sh.dq[(e / d.cp) * ldq + e % d.cp] *= sh.r[e / d.cp];
  __syncthreads();
  const float d_scale = tile::to_operand(sh.d_acc, ld_acc, sh.d_op, ldd, kChunk, kChunk, sh.scratch);
  __syncthreads();
  tile::block_mma<T, Split, true, true>(sh.d_op, ldd, sh.k, ldk, sh.dq, ldq, kChunk, d.cp, kChunk, Causal::kLowerA, 1.f,
                                        d_scale);
  __syncthreads();
  for (int e = threadIdx.x; e < b.rows * d.c; e += blockDim.x) {
    const int t = e / d.c, i = e % d.c;
    args.dq[(b.row0 + t) * d.c + i] = tile::from_float<T>(sh.dq[t * ldq + i] + sh.gd[t] * sh.z[i]);
  }
}

template <typename T>
struct DkvLayout {
  T *q, *k, *a, *v, *g, *ds, *ds_low;
  float *d_acc, *dk, *f, *dz, *r, *gd, *scratch;
  size_t bytes;
  __host__ __device__ DkvLayout(int cp, int mt, unsigned char* base = nullptr) {
    tile::Carve carve{base};
    q = carve.take<T>(kChunk * padded_ld<T>(cp));
    k = carve.take<T>(kChunk * padded_ld<T>(cp));
    a = carve.take<T>(kChunk * padded_ld<T>(kChunk));  // mask(q k^T), later D
    v = carve.take<T>(kChunk * padded_ld<T>(mt));
    g = carve.take<T>(kChunk * padded_ld<T>(mt));
    ds = carve.take<T>(cp * padded_ld<T>(mt));
    ds_low = kSplitStates<T> ? carve.take<T>(cp * padded_ld<T>(mt)) : nullptr;
    d_acc = carve.take<float>(kChunk * padded_ld<float>(kChunk));
    dk = carve.take<float>(kChunk * padded_ld<float>(cp));
    f = carve.take<float>(max(kChunk, cp) * padded_ld<float>(max(kChunk, mt)));
    dz = carve.take<float>(cp);
    r = carve.take<float>(kChunk);
    gd = carve.take<float>(kChunk);
    scratch = carve.take<float>(tile::kWarps);
    bytes = carve.bytes;
  }
};

template <typename T, bool Split>
__global__ void __launch_bounds__(tile::kThreads) chunk_dkv_kernel(BackwardArgs<T> args, Dims d) {
  const auto sh = shared_tiles<DkvLayout<T>>(d.cp, d.mt);
  const Block b(d, false);
  const int ldk = padded_ld<T>(d.cp), ldv = padded_ld<T>(d.mt), lda = padded_ld<T>(kChunk);
  const int ld_acc = padded_ld<float>(kChunk), ldk32 = padded_ld<float>(d.cp), ldf = padded_ld<float>(max(kChunk, d.mt));

  load_features(args.q, d, b, sh.q);
  load_features(args.k, d, b, sh.k);
  load_vectors(args, d, b, args.dz + b.state * d.c, sh.r, sh.gd, sh.dz);
  __syncthreads();
  tile::block_mma<T, Split, true, false>(sh.q, ldk, sh.k, ldk, sh.f, ldf, kChunk, kChunk, d.cp, Causal::kLowerOutput,
                                         0.f, 1.f);
  __syncthreads();
  tile::causal_mask(sh.f, ldf, kChunk, sh.r, nullptr);  // diag(r) mask(q k^T)
  __syncthreads();
  const float a_scale = tile::to_operand(sh.f, ldf, sh.a, lda, kChunk, kChunk, sh.scratch);
  for (int value_tile = 0; value_tile < d.value_tiles; ++value_tile) {
    __syncthreads();  // f, v, g and ds are free again
    load_value_tile(args.v, args.grad, d, b, value_tile, sh.v, sh.g);
    const float ds_scale = load_state_tile(args.dkv, d, b.state, value_tile, sh.ds, sh.ds_low, sh.f, ldf, sh.scratch);
    const float keep = value_tile > 0 ? 1.f : 0.f;
    // d_acc += grad V^T, dk += V dS^T (both over this tile's value columns)
    tile::block_mma<T, Split, true, false>(sh.g, ldv, sh.v, ldv, sh.d_acc, ld_acc, kChunk, kChunk, d.mt, Causal::kNone,
                                           keep, 1.f);
    tile::block_mma<T, Split, true, false>(sh.v, ldv, sh.ds, ldv, sh.dk, ldk32, kChunk, d.cp, d.mt, Causal::kNone, keep,
                                           ds_scale, sh.ds_low);
    // dv tile = (diag(r) A)^T grad + K dS, A read transposed
    tile::block_mma<T, Split, false, true>(sh.a, lda, sh.g, ldv, sh.f, ldf, kChunk, d.mt, kChunk, Causal::kUpperA, 0.f,
                                           a_scale);
    __syncthreads();
    tile::block_mma<T, Split, true, true>(sh.k, ldk, sh.ds, ldv, sh.f, ldf, kChunk, d.mt, d.cp, Causal::kNone, 1.f,
                                          ds_scale);
    __syncthreads();
    tile::store_tile(sh.f, ldf, b.rows, d.tile_cols(value_tile), args.dv + b.row0 * d.m + value_tile * d.mt, d.m);
  }
  __syncthreads();
  tile::causal_mask(sh.d_acc, ld_acc, kChunk, sh.r, sh.gd);
  __syncthreads();
  // a is free: D takes it
  const float d_scale = tile::to_operand(sh.d_acc, ld_acc, sh.a, lda, kChunk, kChunk, sh.scratch);
  __syncthreads();
  tile::block_mma<T, Split, false, true>(sh.a, lda, sh.q, ldk, sh.dk, ldk32, kChunk, d.cp, kChunk, Causal::kUpperA, 1.f,
                                         d_scale);
  __syncthreads();
  for (int e = threadIdx.x; e < b.rows * d.c; e += blockDim.x) {
    const int t = e / d.c, i = e % d.c;
    args.dk[(b.row0 + t) * d.c + i] = tile::from_float<T>(sh.dk[t * ldk32 + i] + sh.dz[i]);
  }
}

}  // namespace chunk
}  // namespace lintf
