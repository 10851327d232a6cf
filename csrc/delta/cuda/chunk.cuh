// The CUDA delta rule's forward around its sweep (sweeps.cuh), fused per chunk; the backward's parallel part
// is batched ATen (aten.h). Notation as aten.h: chunks of kChunk = 64 positions, b the cumulative log-decay
// inside a chunk, e = exp(b), f = exp(B - b), D[t][s] = exp(b_t - b_s) on and below the diagonal.
//   1. delta_prepare_kernel, one block per (head, chunk): b, exp(B), A = diag(beta) ((K K^T) o D) strictly
//      lower, T = (I + A)^{-1} by forward substitution, and the sweep's operands U0 = T diag(beta) V,
//      W = T diag(beta e) K and F = diag(f) K, all fp32 in (heads, chunks, kChunk, .) arrays; for the
//      backward (which runs it too) also e, f, D, h = (K K^T) o D strictly lower, A, T, diag(e) K, diag(beta e) K;
//   2. the forward sweep (sweeps.cuh): S_c entering each chunk and U_c = U0_c - W_c S_c;
//   3. delta_output_kernel, one block per (head, chunk, value tile):
//        out = scale (diag(e) Q S_c + ((Q K^T) o D) U_c).
// Tiles are fp32 whatever the inputs' type, and products run as 3xTF32 (TF32 where torch allows it), as in
// the sweeps: the same arithmetic as the fp32 ATen form, without its passes over global memory.
#pragma once

#include "common/cuda/chunk_grid.cuh"
#include "common/cuda/chunk_tiles.cuh"

namespace lintf {
namespace delta_chunk {

using chunk::Block;
using chunk::Dims;
using tile::Causal;
using tile::kChunk;
using tile::padded_ld;

// ---- step 1: each chunk's UT transform and the sweep's operands -------------------------------------------

template <typename T>
struct PrepareArgs {
  const T *k, *v;                 // (heads, n, c), (heads, n, m)
  const float *beta, *log_decay;  // (heads, n); log_decay null: no decay
  float *u0, *w, *f;              // (heads, chunks, kChunk, m), (heads, chunks, kChunk, c) twice
  float *cumulative, *whole;      // b: (heads, chunks, kChunk); exp(B): (heads, chunks)
  // for the backward (null: not written): e, f (heads, chunks, kChunk); D, h, A, T (heads, chunks, kChunk,
  // kChunk); diag(e) K, diag(beta e) K (heads, chunks, kChunk, c)
  float *e, *f_rows, *decay, *h, *a, *t, *ek, *kb;
};

// fp32 tiles (T, the inputs' type, only names the instance, as chunk::plan_shape expects of a layout).
template <typename T>
struct PrepareLayout {
  float *k, *t, *x, *out, *rows;
  size_t bytes;
  __host__ __device__ PrepareLayout(int cp, int mt, unsigned char* base = nullptr) {
    tile::Carve carve{base};
    k = carve.take<float>(kChunk * padded_ld<float>(cp));       // K, then diag(beta e) K
    t = carve.take<float>(kChunk * padded_ld<float>(kChunk));   // K K^T, A, then T
    x = carve.take<float>(kChunk * padded_ld<float>(mt));       // diag(beta) V, a value tile at a time
    out = carve.take<float>(kChunk * padded_ld<float>(cp > mt ? cp : mt));
    rows = carve.take<float>(8 * kChunk);                       // b, beta, e, f and 4 x kChunk partial sums
    bytes = carve.bytes;
  }
};

// t (kChunk x kChunk, fp32) <- (I + A)^{-1} in place, for A strictly lower in t (zeros on and above the
// diagonal): row i of the inverse is e_i - sum_{k < i} A[i][k] T[k], from the rows before it. Four threads
// share each column's sum (kChunk / 4 terms each, in `partial`, 4 * kChunk floats). Ends with a barrier.
__device__ inline void invert_unit_lower(float* t, int ld, float* partial) {
  const int column = threadIdx.x % kChunk, quarter = threadIdx.x / kChunk;
  constexpr int kSpan = kChunk / 4;
  for (int i = 1; i < kChunk; ++i) {
    if (quarter < 4) {
      float sum = 0.f;
      for (int k = max(column, quarter * kSpan); k < min(i, (quarter + 1) * kSpan); ++k) {
        sum += t[i * ld + k] * (k == column ? 1.f : t[k * ld + column]);
      }
      partial[quarter * kChunk + column] = sum;
    }
    __syncthreads();
    if (threadIdx.x < i) {
      const int j = threadIdx.x;
      t[i * ld + j] = -(partial[j] + partial[kChunk + j] + partial[2 * kChunk + j] + partial[3 * kChunk + j]);
    }
    __syncthreads();
  }
  for (int i = threadIdx.x; i < kChunk; i += blockDim.x) t[i * ld + i] = 1.f;
  __syncthreads();
}

// The chunk's b (in-chunk cumulative log-decay, zero without decay and past the last row), beta (zero past
// the last row), e and f in shared memory; b and exp(B) to global memory for the output kernel and the sweep.
template <typename T>
__device__ void load_rows(const PrepareArgs<T>& a, const Block& blk, float* b, float* beta, float* e, float* f) {
  for (int t = threadIdx.x; t < kChunk; t += blockDim.x) {
    const bool in = t < blk.rows;
    beta[t] = in ? a.beta[blk.row0 + t] : 0.f;
    b[t] = in && a.log_decay != nullptr ? a.log_decay[blk.row0 + t] : 0.f;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int t = 1; t < kChunk; ++t) b[t] += b[t - 1];
  }
  __syncthreads();
  const float total = b[kChunk - 1];
  for (int t = threadIdx.x; t < kChunk; t += blockDim.x) {
    e[t] = expf(b[t]), f[t] = expf(total - b[t]);
    a.cumulative[blk.state * kChunk + t] = b[t];
    if (a.e != nullptr) a.e[blk.state * kChunk + t] = e[t], a.f_rows[blk.state * kChunk + t] = f[t];
  }
  if (threadIdx.x == 0) a.whole[blk.state] = expf(total);
}

template <typename T, bool Split>
__global__ void __launch_bounds__(tile::kThreads) delta_prepare_kernel(PrepareArgs<T> a, Dims d) {
  const auto sh = chunk::shared_tiles<PrepareLayout<T>>(d.cp, d.mt);
  const Block blk(d, false);
  float *b = sh.rows, *beta = b + kChunk, *e = beta + kChunk, *f = e + kChunk, *partial = f + kChunk;
  const int ldk = padded_ld<float>(d.cp), ldt = padded_ld<float>(kChunk), ldx = padded_ld<float>(d.mt);
  const int ldo = padded_ld<float>(d.cp > d.mt ? d.cp : d.mt);
  const int64_t first = blk.state * kChunk;  // the chunk's first row in the (heads, chunks, kChunk, .) arrays
  chunk::load_features(a.k, d, blk, sh.k);
  load_rows(a, blk, b, beta, e, f);
  __syncthreads();
  // K K^T, k read as a column-major (cp x kChunk) operand; fragments above the diagonal are not needed
  tile::block_mma<float, Split, true, false>(sh.k, ldk, sh.k, ldk, sh.t, ldt, kChunk, kChunk, d.cp,
                                             Causal::kLowerOutput, 0.f, 1.f);
  for (int i = threadIdx.x; i < kChunk * d.c; i += blockDim.x) {  // F = diag(f) K (and diag(e) K)
    const int r = i / d.c, col = i % d.c;
    a.f[(first + r) * d.c + col] = f[r] * sh.k[r * ldk + col];
    if (a.ek != nullptr) a.ek[(first + r) * d.c + col] = e[r] * sh.k[r * ldk + col];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kChunk * kChunk; i += blockDim.x) {  // A, strictly lower (and D, h)
    const int r = i / kChunk, s = i % kChunk;
    const float decay = s <= r ? expf(b[r] - b[s]) : 0.f, h = s < r ? sh.t[r * ldt + s] * decay : 0.f;
    sh.t[r * ldt + s] = beta[r] * h;
    if (a.h != nullptr) {
      const int64_t at = first * kChunk + i;
      a.h[at] = h, a.a[at] = beta[r] * h;
      if (a.decay != nullptr) a.decay[at] = decay;
    }
  }
  for (int i = threadIdx.x; i < kChunk * d.cp; i += blockDim.x) {  // diag(beta e) K
    const int r = i / d.cp, col = i % d.cp;
    sh.k[r * ldk + col] *= beta[r] * e[r];
    if (a.kb != nullptr && col < d.c) a.kb[(first + r) * d.c + col] = sh.k[r * ldk + col];
  }
  __syncthreads();
  invert_unit_lower(sh.t, ldt, partial);
  if (a.t != nullptr) {
    for (int i = threadIdx.x; i < kChunk * kChunk; i += blockDim.x) {
      a.t[first * kChunk + i] = sh.t[(i / kChunk) * ldt + i % kChunk];
    }
  }
  // W = T diag(beta e) K
  tile::block_mma<float, Split, true, true>(sh.t, ldt, sh.k, ldk, sh.out, ldo, kChunk, d.cp, kChunk,
                                            Causal::kLowerA, 0.f, 1.f);
  __syncthreads();
  tile::store_tile(sh.out, ldo, kChunk, d.c, a.w + first * d.c, d.c);
  for (int tile_index = 0; tile_index < d.value_tiles; ++tile_index) {  // U0 = T diag(beta) V
    const int m0 = tile_index * d.mt, cols = d.tile_cols(tile_index);
    __syncthreads();  // x and out are free
    tile::load_tile(a.v + blk.row0 * d.m + m0, d.m, blk.rows, cols, beta, sh.x, ldx, kChunk, d.mt);
    __syncthreads();
    tile::block_mma<float, Split, true, true>(sh.t, ldt, sh.x, ldx, sh.out, ldo, kChunk, d.mt, kChunk,
                                              Causal::kLowerA, 0.f, 1.f);
    __syncthreads();
    tile::store_tile(sh.out, ldo, kChunk, cols, a.u0 + first * d.m + m0, d.m);
  }
}

// ---- step 3: the outputs ------------------------------------------------------------------------------------

template <typename T>
struct OutputArgs {
  const T *q, *k;                             // (heads, n, c)
  const float *cumulative, *states, *u;       // b; S_c (heads, chunks, c, m); U_c (heads, chunks, kChunk, m)
  T* out;                                     // (heads, n, m)
  float scale;
};

template <typename T>
struct OutputLayout {
  float *q, *ks, *p, *u, *out, *rows;
  size_t bytes;
  __host__ __device__ OutputLayout(int cp, int mt, unsigned char* base = nullptr) {
    tile::Carve carve{base};
    q = carve.take<float>(kChunk * padded_ld<float>(cp));
    const int k_floats = kChunk * padded_ld<float>(cp), s_floats = cp * padded_ld<float>(mt);
    ks = carve.take<float>(k_floats > s_floats ? k_floats : s_floats);  // k, later the state's value tile
    p = carve.take<float>(kChunk * padded_ld<float>(kChunk));
    u = carve.take<float>(kChunk * padded_ld<float>(mt));
    out = carve.take<float>(kChunk * padded_ld<float>(mt));
    rows = carve.take<float>(2 * kChunk);  // b, scale e
    bytes = carve.bytes;
  }
};

template <typename T, bool Split>
__global__ void __launch_bounds__(tile::kThreads) delta_output_kernel(OutputArgs<T> a, Dims d) {
  const auto sh = chunk::shared_tiles<OutputLayout<T>>(d.cp, d.mt);
  const Block blk(d, true);
  float *b = sh.rows, *scaled_e = b + kChunk;
  const int ldq = padded_ld<float>(d.cp), lds = padded_ld<float>(d.mt), ldp = padded_ld<float>(kChunk);
  for (int t = threadIdx.x; t < kChunk; t += blockDim.x) {
    b[t] = a.cumulative[blk.state * kChunk + t];
    scaled_e[t] = a.scale * expf(b[t]);
  }
  chunk::load_features(a.q, d, blk, sh.q);
  chunk::load_features(a.k, d, blk, sh.ks);
  tile::load_tile(a.u + blk.state * kChunk * d.m + blk.m0, d.m, kChunk, blk.cols, static_cast<const float*>(nullptr),
                  sh.u, lds, kChunk, d.mt);
  __syncthreads();
  tile::block_mma<float, Split, true, false>(sh.q, ldq, sh.ks, ldq, sh.p, ldp, kChunk, kChunk, d.cp,
                                             Causal::kLowerOutput, 0.f, 1.f);
  __syncthreads();
  for (int i = threadIdx.x; i < kChunk * kChunk; i += blockDim.x) {  // scale ((Q K^T) o D)
    const int t = i / kChunk, s = i % kChunk;
    sh.p[t * ldp + s] = s > t ? 0.f : a.scale * sh.p[t * ldp + s] * expf(b[t] - b[s]);
  }
  // k is no longer needed: the state's value tile takes its place
  tile::load_tile(a.states + blk.state * int64_t(d.c) * d.m + blk.m0, d.m, d.c, blk.cols,
                  static_cast<const float*>(nullptr), sh.ks, lds, d.cp, d.mt);
  __syncthreads();
  tile::block_mma<float, Split, true, true>(sh.q, ldq, sh.ks, lds, sh.out, lds, kChunk, d.mt, d.cp, Causal::kNone,
                                            0.f, 1.f);
  __syncthreads();
  for (int i = threadIdx.x; i < kChunk * d.mt; i += blockDim.x) {
    sh.out[(i / d.mt) * lds + i % d.mt] *= scaled_e[i / d.mt];
  }
  __syncthreads();
  tile::block_mma<float, Split, true, true>(sh.p, ldp, sh.u, lds, sh.out, lds, kChunk, d.mt, kChunk, Causal::kLowerA,
                                            1.f, 1.f);
  __syncthreads();
  tile::store_tile(sh.out, lds, blk.rows, blk.cols, a.out + blk.row0 * d.m + blk.m0, d.m);
}

}  // namespace delta_chunk
}  // namespace lintf
