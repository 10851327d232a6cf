// Backward kernels of the chunked CUDA gated linear attention (forward and notation: chunk.cuh).
//
// With G = grad_out, the states S_c entering each chunk (forward scan), R_c = dL/dS after chunk c (the
// reverse scan of scale (Q o exp(b))^T G from the final state's gradient), A the chunk's scores and
// dA = scale G V^T (used on and below the diagonal), inside chunk c:
//   dq_t = sum_{s<=t} dA_ts k_s o exp(b_t - b_s) + scale exp(b_t) o (G S_c^T)_t        (gla_dq_kernel)
//   dk_s = sum_{t>=s} dA_ts q_t o exp(b_t - b_s) + exp(B - b_s) o (V R_c^T)_s           (gla_dkv_kernel)
//   dv   = scale A^T G + (K o exp(B - b)) R_c                                          (gla_dkv_kernel)
// The in-chunk sums are per-feature, like the scores: each thread owns (row, feature) pairs. For
// d log_gate, take the chunk's cumulative gates b_t as free variables: q_t enters only as q_t o exp(b_t),
// k_t as k_t o exp(-b_t) and the state leaving the chunk carries diag(exp(B)), B = b_last, so
//   dL/db_t = q_t o dq_t - k_t o dk_t + [t last] rowsum(R_c o S_{c+1}),
// and d log_gate_t, the sum of dL/db_t' over t' >= t in the chunk, is x_c + sum_{t' >= t} (q o dq - k o dk)_t'
// with x_c = rowsum(R_c o S_{c+1}) (host). The dq kernel writes q o dq where d log_gate goes; the dkv
// kernel, launched after it, completes the sum. dq and dk contract over all value columns, so both kernels
// run one block per (head, chunk) and loop over the value tiles, accumulating in fp32 shared memory.
#pragma once

#include "common/cuda/chunk_tiles.cuh"
#include "gla/cuda/chunk.cuh"

namespace lintf {
namespace gla_chunk {

template <typename T>
struct BackwardArgs {
  const T *q, *k, *v, *grad;  // (heads, n, c), (heads, n, c), (heads, n, m), (heads, n, m)
  const float* cumulative;    // (heads, chunks, kChunk, c)
  const float* states;        // S_c before each chunk: (heads, chunks, c, m)
  const float* grad_states;   // R_c after each chunk: (heads, chunks, c, m)
  const float* x;             // (heads, chunks, c): rowsum(R_c o S_{c+1})
  float scale;
  T *dq, *dk, *dv;
  float* d_log_gate;          // (heads, n, c): q o dq from the dq kernel, then d log_gate
};

using chunk::kNoLow;  // GLA's states enter the tensor cores whole
using chunk::load_features;
using chunk::load_state_tile;
using chunk::load_value_tile;

template <typename T>
struct DqLayout {
  T *k, *v, *g, *s;
  float *m_acc, *dq, *f, *b, *scratch;
  size_t bytes;
  __host__ __device__ DqLayout(int cp, int mt, unsigned char* base = nullptr) {
    tile::Carve carve{base};
    k = carve.take<T>(kChunk * padded_ld<T>(cp));
    v = carve.take<T>(kChunk * padded_ld<T>(mt));
    g = carve.take<T>(kChunk * padded_ld<T>(mt));
    s = carve.take<T>(cp * padded_ld<T>(mt));
    m_acc = carve.take<float>(kChunk * padded_ld<float>(kChunk));
    dq = carve.take<float>(kChunk * padded_ld<float>(cp));
    f = carve.take<float>(max(kChunk, cp) * padded_ld<float>(mt));
    b = carve.take<float>(kChunk * padded_ld<float>(cp));
    scratch = carve.take<float>(tile::kWarps);
    bytes = carve.bytes;
  }
};

template <typename T, bool Split>
__global__ void __launch_bounds__(tile::kThreads) gla_dq_kernel(BackwardArgs<T> args, Dims d) {
  const auto sh = chunk::shared_tiles<DqLayout<T>>(d.cp, d.mt);
  const Block block(d, false);
  const int ldk = padded_ld<T>(d.cp), ldv = padded_ld<T>(d.mt), ld_acc = padded_ld<float>(kChunk);
  const int ldq = padded_ld<float>(d.cp), ldf = padded_ld<float>(d.mt);

  load_gates(args.cumulative, d, block, sh.b);
  load_features(args.k, d, block, sh.k);
  for (int value_tile = 0; value_tile < d.value_tiles; ++value_tile) {
    __syncthreads();  // the previous tile's products are done with v, g, s and f
    load_value_tile(args.v, args.grad, d, block, value_tile, sh.v, sh.g);
    const float s_scale = load_state_tile(args.states, d, block.state, value_tile, sh.s, kNoLow<T>, sh.f, ldf,
                                          sh.scratch);
    const float keep = value_tile > 0 ? 1.f : 0.f;
    // m_acc += scale grad V^T (kChunk x kChunk), dq += grad S^T (kChunk x cp): v and s read transposed
    tile::block_mma<T, Split, true, false>(sh.g, ldv, sh.v, ldv, sh.m_acc, ld_acc, kChunk, kChunk, d.mt, Causal::kNone,
                                           keep, args.scale);
    tile::block_mma<T, Split, true, false>(sh.g, ldv, sh.s, ldv, sh.dq, ldq, kChunk, d.cp, d.mt, Causal::kNone, keep,
                                           s_scale);
  }
  __syncthreads();
  const float *b = sh.b, *m_acc = sh.m_acc, *dq = sh.dq;
  const T* k = sh.k;
  for (int e = threadIdx.x; e < block.rows * d.c; e += blockDim.x) {
    const int t = e / d.c, i = e % d.c;
    const float b_t = b[t * ldq + i];
    float sum = args.scale * exp2f(b_t) * dq[t * ldq + i];
    for (int u = 0; u <= t; ++u) sum += m_acc[t * ld_acc + u] * tile::to_float(k[u * ldk + i]) * exp2f(b_t - b[u * ldq + i]);
    const int64_t at = (block.row0 + t) * d.c + i;
    args.dq[at] = tile::from_float<T>(sum);
    args.d_log_gate[at] = tile::to_float(args.q[at]) * sum;
  }
}

template <typename T>
struct DkvLayout {
  T *q, *k, *a, *v, *g, *r;
  float *m_acc, *dk, *f, *b, *scratch;
  size_t bytes;
  __host__ __device__ DkvLayout(int cp, int mt, unsigned char* base = nullptr) {
    tile::Carve carve{base};
    q = carve.take<T>(kChunk * padded_ld<T>(cp));
    k = carve.take<T>(kChunk * padded_ld<T>(cp));      // k, later k o exp(B - b)
    a = carve.take<T>(kChunk * padded_ld<T>(kChunk));  // the scores
    v = carve.take<T>(kChunk * padded_ld<T>(mt));
    g = carve.take<T>(kChunk * padded_ld<T>(mt));
    r = carve.take<T>(cp * padded_ld<T>(mt));
    m_acc = carve.take<float>(kChunk * padded_ld<float>(kChunk));  // the scores staged, then dA
    dk = carve.take<float>(kChunk * padded_ld<float>(cp));         // k o exp(B - b) staged, then dk
    f = carve.take<float>(max(kChunk, cp) * padded_ld<float>(mt));
    b = carve.take<float>(kChunk * padded_ld<float>(cp));
    scratch = carve.take<float>(tile::kWarps);
    bytes = carve.bytes;
  }
};

// dk rows from the value loop's V R^T in dk and dA in m_acc; written out, and k o dk left in dk.
template <typename T>
__device__ void finish_dk(const BackwardArgs<T>& args, const Dims& d, int64_t row0, int rows, const T* q,
                          const float* b, const float* m_acc, float* dk) {
  const int ldq = padded_ld<T>(d.cp), ld = padded_ld<float>(d.cp), ld_acc = padded_ld<float>(kChunk);
  for (int e = threadIdx.x; e < rows * d.c; e += blockDim.x) {
    const int s = e / d.c, i = e % d.c;
    const float b_s = b[s * ld + i];
    float sum = exp2f(b[(kChunk - 1) * ld + i] - b_s) * dk[s * ld + i];
    for (int t = s; t < rows; ++t) sum += m_acc[t * ld_acc + s] * tile::to_float(q[t * ldq + i]) * exp2f(b[t * ld + i] - b_s);
    const int64_t at = (row0 + s) * d.c + i;
    args.dk[at] = tile::from_float<T>(sum);
    dk[s * ld + i] = tile::to_float(args.k[at]) * sum;
  }
}

// d log_gate_t = x_c + sum_{t' >= t} (q o dq - k o dk)_t', feature by feature, with q o dq already in
// d_log_gate and k o dk in k_dk.
__device__ inline void finish_d_log_gate(float* d_log_gate, const float* k_dk, const float* x, const Dims& d,
                                         int rows) {
  const int ld = padded_ld<float>(d.cp);
  for (int i = threadIdx.x; i < d.c; i += blockDim.x) {
    float sum = x[i];
    for (int t = rows - 1; t >= 0; --t) {
      sum += d_log_gate[int64_t(t) * d.c + i] - k_dk[t * ld + i];
      d_log_gate[int64_t(t) * d.c + i] = sum;
    }
  }
}

template <typename T, bool Split>
__global__ void __launch_bounds__(tile::kThreads) gla_dkv_kernel(BackwardArgs<T> args, Dims d) {
  const auto sh = chunk::shared_tiles<DkvLayout<T>>(d.cp, d.mt);
  const Block block(d, false);
  const int ldk = padded_ld<T>(d.cp), ldv = padded_ld<T>(d.mt), lda = padded_ld<T>(kChunk);
  const int ld_acc = padded_ld<float>(kChunk), ldk32 = padded_ld<float>(d.cp), ldf = padded_ld<float>(d.mt);

  load_gates(args.cumulative, d, block, sh.b);
  load_features(args.q, d, block, sh.q);
  load_features(args.k, d, block, sh.k);
  __syncthreads();
  gated_scores(sh.q, sh.k, sh.b, d, sh.m_acc, ld_acc);
  __syncthreads();
  const float a_scale = tile::to_operand(sh.m_acc, ld_acc, sh.a, lda, kChunk, kChunk, sh.scratch);
  load_gated(args.k, d, block, sh.b, true, sh.dk);
  __syncthreads();
  const float k_scale = tile::to_operand(sh.dk, ldk32, sh.k, ldk, kChunk, d.cp, sh.scratch);
  for (int value_tile = 0; value_tile < d.value_tiles; ++value_tile) {
    __syncthreads();  // f, v, g and r are free again
    load_value_tile(args.v, args.grad, d, block, value_tile, sh.v, sh.g);
    const float r_scale = load_state_tile(args.grad_states, d, block.state, value_tile, sh.r, kNoLow<T>, sh.f, ldf,
                                          sh.scratch);
    const float keep = value_tile > 0 ? 1.f : 0.f;
    // m_acc += scale grad V^T, dk += V R^T (both over this tile's value columns)
    tile::block_mma<T, Split, true, false>(sh.g, ldv, sh.v, ldv, sh.m_acc, ld_acc, kChunk, kChunk, d.mt, Causal::kNone,
                                           keep, args.scale);
    tile::block_mma<T, Split, true, false>(sh.v, ldv, sh.r, ldv, sh.dk, ldk32, kChunk, d.cp, d.mt, Causal::kNone, keep,
                                           r_scale);
    // dv tile = (K o exp(B - b)) R + scale A^T grad, A read transposed
    tile::block_mma<T, Split, true, true>(sh.k, ldk, sh.r, ldv, sh.f, ldf, kChunk, d.mt, d.cp, Causal::kNone, 0.f,
                                          k_scale * r_scale);
    __syncthreads();
    tile::block_mma<T, Split, false, true>(sh.a, lda, sh.g, ldv, sh.f, ldf, kChunk, d.mt, kChunk, Causal::kUpperA, 1.f,
                                           a_scale * args.scale);
    __syncthreads();
    tile::store_tile(sh.f, ldf, block.rows, d.tile_cols(value_tile), args.dv + block.row0 * d.m + value_tile * d.mt,
                     d.m);
  }
  __syncthreads();
  finish_dk(args, d, block.row0, block.rows, sh.q, sh.b, sh.m_acc, sh.dk);
  __syncthreads();
  finish_d_log_gate(args.d_log_gate + block.row0 * d.c, sh.dk, args.x + block.state * d.c, d, block.rows);
}

}  // namespace gla_chunk
}  // namespace lintf
