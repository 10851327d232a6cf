// Backward kernels of the chunked CUDA decayed product (forward and notation: chunk.cuh).
//
// With G = grad_out, the states S_c entering each chunk (forward scan) and R_c = dL/dS after chunk c
// (the reverse scan of (diag(exp(b)) Q)^T G from the final state's gradient), and M = (G V^T) o D,
// A = (Q K^T) o D inside chunk c:
//   dq = M K + diag(exp(b)) G S_c^T                  (decayed_dq_kernel)
//   dk = M^T Q + diag(exp(B - b)) V R_c^T            (decayed_dkv_kernel)
//   dv = A^T G + diag(exp(B - b)) K R_c              (decayed_dkv_kernel)
// For d log_decay, take the chunk's cumulative decays b_t as free variables: q_t enters only as
// exp(b_t) q_t, k_t as exp(-b_t) k_t and the state leaving the chunk carries exp(B), B = b_last, so
//   dL/db_t = q_t . dq_t - k_t . dk_t + [t last] <R_c, S_{c+1}>,
// and d log_decay_t, the sum of dL/db_t' over t' >= t in the chunk (b_t' includes log_decay_t), is
// x_c + sum_{t' >= t} (q_t' . dq_t' - k_t' . dk_t') with x_c = <R_c, S_{c+1}> (host). The dq kernel writes
// q_t . dq_t where d log_decay goes; the dkv kernel, launched after it, completes the sum.
// dq and dk contract over all value columns, so both kernels run one block per (head, chunk) and loop
// over the value tiles, accumulating in fp32 shared memory.
#pragma once

#include "common/cuda/chunk_tiles.cuh"
#include "decayed/cuda/chunk.cuh"

namespace lintf {
namespace decayed_chunk {

template <typename T>
struct BackwardArgs {
  const T *q, *k, *v, *grad;  // (heads, n, c), (heads, n, c), (heads, n, m), (heads, n, m)
  const float* cumulative;    // (heads, chunks, kChunk)
  const float* states;        // S_c before each chunk: (heads, chunks, c, m)
  const float* grad_states;   // R_c after each chunk: (heads, chunks, c, m)
  const float* x;             // (heads, chunks): <R_c, S_{c+1}>
  T *dq, *dk, *dv;
  float* d_log_decay;         // (heads, n): q . dq from the dq kernel, then d log_decay
};

using chunk::kNoLow;  // the decayed product's states enter the tensor cores whole
using chunk::load_features;
using chunk::load_state_tile;
using chunk::load_value_tile;

// out[t] = x_t . y_t for the chunk's rows, x in global memory (row length c), y an fp32 tile.
template <typename T>
__device__ void row_dots(const T* x, const float* y, int ldy, int rows, int c, float* out) {
  for (int t = threadIdx.x; t < rows; t += blockDim.x) {
    float sum = 0.f;
    for (int i = 0; i < c; ++i) sum += tile::to_float(x[int64_t(t) * c + i]) * y[t * ldy + i];
    out[t] = sum;
  }
}

// The end of dq (kSide kLowerA: dq = diag(exp(b)) G S^T + M K) and of dk (kUpperA: dk = diag(exp(B - b)) V R^T
// + M^T Q), M = (G V^T) o D, from the value loop's sums: G V^T in m_acc, the state term in acc (kChunk x cp).
// M goes through m_op, other is K or Q; the gradient, finished in acc, goes to grad and its row dots with x
// (q . dq or k . dk) to dots.
template <typename T, bool Split, Causal kSide>
__device__ void finish_gradient(const Dims& d, const Block& b, const float* decay_b, const float* row_decay,
                                float* m_acc, T* m_op, const T* other, float* acc, float* scratch, const T* x, T* grad,
                                float* dots) {
  const int ld_acc = padded_ld<float>(kChunk), ldm = padded_ld<T>(kChunk), ld = padded_ld<float>(d.cp);
  __syncthreads();
  decay_mask(m_acc, ld_acc, decay_b);
  scale_rows(acc, ld, kChunk, d.cp, row_decay);
  __syncthreads();
  const float m_scale = tile::to_operand(m_acc, ld_acc, m_op, ldm, kChunk, kChunk, scratch);
  __syncthreads();
  // M read as it is for dq, transposed for dk
  tile::block_mma<T, Split, kSide == Causal::kLowerA, true>(m_op, ldm, other, padded_ld<T>(d.cp), acc, ld, kChunk, d.cp,
                                                             kChunk, kSide, 1.f, m_scale);
  __syncthreads();
  for (int e = threadIdx.x; e < b.rows * d.c; e += blockDim.x) {
    const int t = e / d.c, i = e % d.c;
    grad[(b.row0 + t) * d.c + i] = tile::from_float<T>(acc[t * ld + i]);
  }
  row_dots(x + b.row0 * d.c, acc, ld, b.rows, d.c, dots);
}

template <typename T>
struct DqLayout {
  T *k, *v, *g, *s, *m_op;
  float *m_acc, *dq, *f, *decays, *scratch;
  size_t bytes;
  __host__ __device__ DqLayout(int cp, int mt, unsigned char* base = nullptr) {
    tile::Carve carve{base};
    k = carve.take<T>(kChunk * padded_ld<T>(cp));
    v = carve.take<T>(kChunk * padded_ld<T>(mt));
    g = carve.take<T>(kChunk * padded_ld<T>(mt));
    s = carve.take<T>(cp * padded_ld<T>(mt));
    m_op = carve.take<T>(kChunk * padded_ld<T>(kChunk));
    m_acc = carve.take<float>(kChunk * padded_ld<float>(kChunk));
    dq = carve.take<float>(kChunk * padded_ld<float>(cp));
    f = carve.take<float>(max(kChunk, cp) * padded_ld<float>(mt));
    decays = carve.take<float>(Decays::kFloats);
    scratch = carve.take<float>(tile::kWarps);
    bytes = carve.bytes;
  }
};

template <typename T, bool Split>
__global__ void __launch_bounds__(tile::kThreads) decayed_dq_kernel(BackwardArgs<T> args, Dims d) {
  const auto sh = chunk::shared_tiles<DqLayout<T>>(d.cp, d.mt);
  Decays decays(sh.decays);
  const Block b(d, false);
  const int ldv = padded_ld<T>(d.mt), ld_acc = padded_ld<float>(kChunk), ldq = padded_ld<float>(d.cp);
  const int ldf = padded_ld<float>(d.mt);

  decays.load(args.cumulative, d, b);
  load_features(args.k, d, b, sh.k);
  for (int value_tile = 0; value_tile < d.value_tiles; ++value_tile) {
    __syncthreads();  // the previous tile's products are done with v, g, s and f
    load_value_tile(args.v, args.grad, d, b, value_tile, sh.v, sh.g);
    const float s_scale = load_state_tile(args.states, d, b.state, value_tile, sh.s, kNoLow<T>, sh.f, ldf, sh.scratch);
    const float keep = value_tile > 0 ? 1.f : 0.f;
    // m_acc += grad V^T (kChunk x kChunk), dq += grad S^T (kChunk x cp): v and s read transposed
    tile::block_mma<T, Split, true, false>(sh.g, ldv, sh.v, ldv, sh.m_acc, ld_acc, kChunk, kChunk, d.mt, Causal::kNone,
                                           keep, 1.f);
    tile::block_mma<T, Split, true, false>(sh.g, ldv, sh.s, ldv, sh.dq, ldq, kChunk, d.cp, d.mt, Causal::kNone, keep,
                                           s_scale);
  }
  finish_gradient<T, Split, Causal::kLowerA>(d, b, decays.b, decays.to_start, sh.m_acc, sh.m_op, sh.k, sh.dq,
                                             sh.scratch, args.q, args.dq, args.d_log_decay + b.row0);
}

template <typename T>
struct DkvLayout {
  T *q, *k, *a, *v, *g, *r;
  float *m_acc, *dk, *f, *decays, *dots, *scratch;
  size_t bytes;
  __host__ __device__ DkvLayout(int cp, int mt, unsigned char* base = nullptr) {
    tile::Carve carve{base};
    q = carve.take<T>(kChunk * padded_ld<T>(cp));
    k = carve.take<T>(kChunk * padded_ld<T>(cp));
    a = carve.take<T>(kChunk * padded_ld<T>(kChunk));  // (q k^T) o D, later M
    v = carve.take<T>(kChunk * padded_ld<T>(mt));
    g = carve.take<T>(kChunk * padded_ld<T>(mt));
    r = carve.take<T>(cp * padded_ld<T>(mt));
    m_acc = carve.take<float>(kChunk * padded_ld<float>(kChunk));
    dk = carve.take<float>(kChunk * padded_ld<float>(cp));
    f = carve.take<float>(max(kChunk, cp) * padded_ld<float>(max(kChunk, mt)));
    decays = carve.take<float>(Decays::kFloats);
    dots = carve.take<float>(kChunk);
    scratch = carve.take<float>(tile::kWarps);
    bytes = carve.bytes;
  }
};

// d log_decay_t = x_c + sum_{t' >= t} (q_t' . dq_t' - k_t' . dk_t'), with q . dq already in d_log_decay.
__device__ inline void finish_d_log_decay(float* d_log_decay, const float* k_dots, int rows, float x) {
  if (threadIdx.x != 0) return;
  for (int t = rows - 1; t >= 0; --t) {
    x += d_log_decay[t] - k_dots[t];
    d_log_decay[t] = x;
  }
}

template <typename T, bool Split>
__global__ void __launch_bounds__(tile::kThreads) decayed_dkv_kernel(BackwardArgs<T> args, Dims d) {
  const auto sh = chunk::shared_tiles<DkvLayout<T>>(d.cp, d.mt);
  Decays decays(sh.decays);
  const Block b(d, false);
  const int ldk = padded_ld<T>(d.cp), ldv = padded_ld<T>(d.mt), lda = padded_ld<T>(kChunk);
  const int ld_acc = padded_ld<float>(kChunk), ldk32 = padded_ld<float>(d.cp), ldf = padded_ld<float>(max(kChunk, d.mt));

  decays.load(args.cumulative, d, b);
  load_features(args.q, d, b, sh.q);
  load_features(args.k, d, b, sh.k);
  __syncthreads();
  tile::block_mma<T, Split, true, false>(sh.q, ldk, sh.k, ldk, sh.f, ldf, kChunk, kChunk, d.cp, Causal::kLowerOutput,
                                         0.f, 1.f);
  __syncthreads();
  decay_mask(sh.f, ldf, decays.b);
  __syncthreads();
  const float a_scale = tile::to_operand(sh.f, ldf, sh.a, lda, kChunk, kChunk, sh.scratch);
  for (int value_tile = 0; value_tile < d.value_tiles; ++value_tile) {
    __syncthreads();  // f, v, g and r are free again
    load_value_tile(args.v, args.grad, d, b, value_tile, sh.v, sh.g);
    const float r_scale = load_state_tile(args.grad_states, d, b.state, value_tile, sh.r, kNoLow<T>, sh.f, ldf,
                                          sh.scratch);
    const float keep = value_tile > 0 ? 1.f : 0.f;
    // m_acc += grad V^T, dk += V R^T (both over this tile's value columns)
    tile::block_mma<T, Split, true, false>(sh.g, ldv, sh.v, ldv, sh.m_acc, ld_acc, kChunk, kChunk, d.mt, Causal::kNone,
                                           keep, 1.f);
    tile::block_mma<T, Split, true, false>(sh.v, ldv, sh.r, ldv, sh.dk, ldk32, kChunk, d.cp, d.mt, Causal::kNone, keep,
                                           r_scale);
    // dv tile = diag(exp(B - b)) K R + A^T grad, A read transposed
    tile::block_mma<T, Split, true, true>(sh.k, ldk, sh.r, ldv, sh.f, ldf, kChunk, d.mt, d.cp, Causal::kNone, 0.f,
                                          r_scale);
    __syncthreads();
    scale_rows(sh.f, ldf, kChunk, d.mt, decays.to_end);
    __syncthreads();
    tile::block_mma<T, Split, false, true>(sh.a, lda, sh.g, ldv, sh.f, ldf, kChunk, d.mt, kChunk, Causal::kUpperA, 1.f,
                                           a_scale);
    __syncthreads();
    tile::store_tile(sh.f, ldf, b.rows, d.tile_cols(value_tile), args.dv + b.row0 * d.m + value_tile * d.mt, d.m);
  }
  // a is free: M takes it
  finish_gradient<T, Split, Causal::kUpperA>(d, b, decays.b, decays.to_end, sh.m_acc, sh.a, sh.q, sh.dk, sh.scratch,
                                             args.k, args.dk, sh.dots);
  __syncthreads();
  finish_d_log_decay(args.d_log_decay + b.row0, sh.dots, b.rows, args.x[b.state]);
}

}  // namespace decayed_chunk
}  // namespace lintf
