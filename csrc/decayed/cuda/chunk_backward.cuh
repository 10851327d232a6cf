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

using chunk::load_state_tile;
using chunk::load_value_tile;

// The decayed product's states enter the tensor cores whole (no rounding remainder kept).
template <typename T>
constexpr T* kNoLow = nullptr;

// out[t] = x_t . y_t for the chunk's rows, x in global memory (row length c), y an fp32 tile.
template <typename T>
__device__ void row_dots(const T* x, const float* y, int ldy, int rows, int c, float* out) {
  for (int t = threadIdx.x; t < rows; t += blockDim.x) {
    float sum = 0.f;
    for (int i = 0; i < c; ++i) sum += tile::to_float(x[int64_t(t) * c + i]) * y[t * ldy + i];
    out[t] = sum;
  }
}

template <typename T>
struct DqLayout {
  size_t k, v, g, s, m_op, m_acc, dq, f, decays, scratch, bytes;
  __host__ __device__ DqLayout(int cp, int mt) {
    tile::Carve carve;
    k = carve.take<T>(kChunk * padded_ld<T>(cp));
    v = carve.take<T>(kChunk * padded_ld<T>(mt));
    g = carve.take<T>(kChunk * padded_ld<T>(mt));
    s = carve.take<T>(cp * padded_ld<T>(mt));
    m_op = carve.take<T>(kChunk * padded_ld<T>(kChunk));
    m_acc = carve.take<float>(kChunk * padded_ld<float>(kChunk));
    dq = carve.take<float>(kChunk * padded_ld<float>(cp));
    f = carve.take<float>(max(kChunk, cp) * padded_ld<float>(mt));
    decays = take_decays(carve);
    scratch = carve.take<float>(tile::kWarps);
    bytes = carve.bytes;
  }
};

template <typename T, bool Split>
__global__ void __launch_bounds__(tile::kThreads) decayed_dq_kernel(BackwardArgs<T> args, Dims d) {
  unsigned char* smem = chunk::shared_memory();
  const DqLayout<T> layout(d.cp, d.mt);
  T *k = tile::at<T>(smem, layout.k), *v = tile::at<T>(smem, layout.v), *g = tile::at<T>(smem, layout.g);
  T *s = tile::at<T>(smem, layout.s), *m_op = tile::at<T>(smem, layout.m_op);
  float *m_acc = tile::at<float>(smem, layout.m_acc), *dq = tile::at<float>(smem, layout.dq);
  float *f = tile::at<float>(smem, layout.f), *scratch = tile::at<float>(smem, layout.scratch);
  Decays decays = decays_at(smem, layout.decays);
  const Block b(d, false);
  const int rows = d.chunk_rows(b.chunk);
  const int64_t row0 = b.head * d.n + int64_t(b.chunk) * kChunk, state = b.head * d.chunks + b.chunk;
  const int ldk = padded_ld<T>(d.cp), ldv = padded_ld<T>(d.mt), ldm = padded_ld<T>(kChunk);
  const int ld_acc = padded_ld<float>(kChunk), ldq = padded_ld<float>(d.cp), ldf = padded_ld<float>(d.mt);

  decays.load(args.cumulative, d, b);
  tile::load_tile(args.k + row0 * d.c, d.c, rows, d.c, static_cast<const float*>(nullptr), k, ldk, kChunk, d.cp);
  for (int value_tile = 0; value_tile < d.value_tiles; ++value_tile) {
    __syncthreads();  // the previous tile's products are done with v, g, s and f
    load_value_tile(args.v, args.grad, d, row0, rows, value_tile, v, g);
    const float s_scale = load_state_tile(args.states, d, state, value_tile, s, kNoLow<T>, f, ldf, scratch);
    const float keep = value_tile > 0 ? 1.f : 0.f;
    // m_acc += grad V^T (kChunk x kChunk), dq += grad S^T (kChunk x cp): v and s read transposed
    tile::block_mma<T, Split, true, false>(g, ldv, v, ldv, m_acc, ld_acc, kChunk, kChunk, d.mt, Causal::kNone, keep, 1.f);
    tile::block_mma<T, Split, true, false>(g, ldv, s, ldv, dq, ldq, kChunk, d.cp, d.mt, Causal::kNone, keep, s_scale);
  }
  __syncthreads();
  decay_mask(m_acc, ld_acc, decays.b);
  scale_rows(dq, ldq, kChunk, d.cp, decays.to_start);
  __syncthreads();
  const float m_scale = tile::to_operand(m_acc, ld_acc, m_op, ldm, kChunk, kChunk, scratch);
  __syncthreads();
  tile::block_mma<T, Split, true, true>(m_op, ldm, k, ldk, dq, ldq, kChunk, d.cp, kChunk, Causal::kLowerA, 1.f, m_scale);
  __syncthreads();
  for (int e = threadIdx.x; e < rows * d.c; e += blockDim.x) {
    const int t = e / d.c, i = e % d.c;
    args.dq[(row0 + t) * d.c + i] = tile::from_float<T>(dq[t * ldq + i]);
  }
  row_dots(args.q + row0 * d.c, dq, ldq, rows, d.c, args.d_log_decay + row0);
}

template <typename T>
struct DkvLayout {
  size_t q, k, a, v, g, r, m_acc, dk, f, decays, dots, scratch, bytes;
  __host__ __device__ DkvLayout(int cp, int mt) {
    tile::Carve carve;
    q = carve.take<T>(kChunk * padded_ld<T>(cp));
    k = carve.take<T>(kChunk * padded_ld<T>(cp));
    a = carve.take<T>(kChunk * padded_ld<T>(kChunk));  // (q k^T) o D, later M
    v = carve.take<T>(kChunk * padded_ld<T>(mt));
    g = carve.take<T>(kChunk * padded_ld<T>(mt));
    r = carve.take<T>(cp * padded_ld<T>(mt));
    m_acc = carve.take<float>(kChunk * padded_ld<float>(kChunk));
    dk = carve.take<float>(kChunk * padded_ld<float>(cp));
    f = carve.take<float>(max(kChunk, cp) * padded_ld<float>(max(kChunk, mt)));
    decays = take_decays(carve);
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
  unsigned char* smem = chunk::shared_memory();
  const DkvLayout<T> layout(d.cp, d.mt);
  T *q = tile::at<T>(smem, layout.q), *k = tile::at<T>(smem, layout.k), *a = tile::at<T>(smem, layout.a);
  T *v = tile::at<T>(smem, layout.v), *g = tile::at<T>(smem, layout.g), *r = tile::at<T>(smem, layout.r);
  float *m_acc = tile::at<float>(smem, layout.m_acc), *dk = tile::at<float>(smem, layout.dk);
  float *f = tile::at<float>(smem, layout.f), *dots = tile::at<float>(smem, layout.dots);
  float* scratch = tile::at<float>(smem, layout.scratch);
  Decays decays = decays_at(smem, layout.decays);
  const Block b(d, false);
  const int rows = d.chunk_rows(b.chunk);
  const int64_t row0 = b.head * d.n + int64_t(b.chunk) * kChunk, state = b.head * d.chunks + b.chunk;
  const int ldk = padded_ld<T>(d.cp), ldv = padded_ld<T>(d.mt), lda = padded_ld<T>(kChunk);
  const int ld_acc = padded_ld<float>(kChunk), ldk32 = padded_ld<float>(d.cp), ldf = padded_ld<float>(max(kChunk, d.mt));
  const float* no_scale = nullptr;

  decays.load(args.cumulative, d, b);
  tile::load_tile(args.q + row0 * d.c, d.c, rows, d.c, no_scale, q, ldk, kChunk, d.cp);
  tile::load_tile(args.k + row0 * d.c, d.c, rows, d.c, no_scale, k, ldk, kChunk, d.cp);
  __syncthreads();
  tile::block_mma<T, Split, true, false>(q, ldk, k, ldk, f, ldf, kChunk, kChunk, d.cp, Causal::kLowerOutput, 0.f, 1.f);
  __syncthreads();
  decay_mask(f, ldf, decays.b);
  __syncthreads();
  const float a_scale = tile::to_operand(f, ldf, a, lda, kChunk, kChunk, scratch);
  for (int value_tile = 0; value_tile < d.value_tiles; ++value_tile) {
    __syncthreads();  // f, v, g and r are free again
    load_value_tile(args.v, args.grad, d, row0, rows, value_tile, v, g);
    const float r_scale = load_state_tile(args.grad_states, d, state, value_tile, r, kNoLow<T>, f, ldf, scratch);
    const float keep = value_tile > 0 ? 1.f : 0.f;
    // m_acc += grad V^T, dk += V R^T (both over this tile's value columns)
    tile::block_mma<T, Split, true, false>(g, ldv, v, ldv, m_acc, ld_acc, kChunk, kChunk, d.mt, Causal::kNone, keep, 1.f);
    tile::block_mma<T, Split, true, false>(v, ldv, r, ldv, dk, ldk32, kChunk, d.cp, d.mt, Causal::kNone, keep, r_scale);
    // dv tile = diag(exp(B - b)) K R + A^T grad, A read transposed
    tile::block_mma<T, Split, true, true>(k, ldk, r, ldv, f, ldf, kChunk, d.mt, d.cp, Causal::kNone, 0.f, r_scale);
    __syncthreads();
    scale_rows(f, ldf, kChunk, d.mt, decays.to_end);
    __syncthreads();
    tile::block_mma<T, Split, false, true>(a, lda, g, ldv, f, ldf, kChunk, d.mt, kChunk, Causal::kUpperA, 1.f, a_scale);
    __syncthreads();
    tile::store_tile(f, ldf, rows, d.tile_cols(value_tile), args.dv + row0 * d.m + value_tile * d.mt, d.m);
  }
  __syncthreads();
  decay_mask(m_acc, ld_acc, decays.b);
  scale_rows(dk, ldk32, kChunk, d.cp, decays.to_end);
  __syncthreads();
  const float m_scale = tile::to_operand(m_acc, ld_acc, a, lda, kChunk, kChunk, scratch);  // a is free: M takes it
  __syncthreads();
  tile::block_mma<T, Split, false, true>(a, lda, q, ldk, dk, ldk32, kChunk, d.cp, kChunk, Causal::kUpperA, 1.f, m_scale);
  __syncthreads();
  for (int e = threadIdx.x; e < rows * d.c; e += blockDim.x) {
    const int t = e / d.c, i = e % d.c;
    args.dk[(row0 + t) * d.c + i] = tile::from_float<T>(dk[t * ldk32 + i]);
  }
  row_dots(args.k + row0 * d.c, dk, ldk32, rows, d.c, dots);
  __syncthreads();
  finish_d_log_decay(args.d_log_decay + row0, dots, rows, args.x[state]);
}

}  // namespace decayed_chunk
}  // namespace lintf
