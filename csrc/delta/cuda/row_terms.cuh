// The per-row gradient terms of the CUDA delta rule's backward in one kernel: d beta and d log_decay from the
// (kChunk x .) fp32 matrices the ATen part computed (aten.h's gradients(), its notation; na = -dA), one block
// per (head, chunk), one warp per row:
//   d beta_t = <dR_t, X_t> - <na_t, h_t>
//   db_t = sum_s Z[t][s] - sum_s Z[s][t] + <Qe_t, (dO S_c^T)_t> - <ek_t, (dX S_c^T)_t> - <F_t, (U dS_c^T)_t>,
//          Z = dP o P - na o a, with exp(B) <S_c, dS_c> + sum_t <F_t, (U dS_c^T)_t> added at the last row,
//   d log_decay_t = sum_{t' >= t} db_t' inside the chunk (only with decay).
#pragma once

#include "common/cuda/chunk_grid.cuh"

namespace lintf {
namespace delta_rows {

using tile::kChunk;

struct RowTermArgs {
  const float *dp, *p, *na, *a, *h;                   // (heads, chunks, kChunk, kChunk)
  const float *qe, *dos_st, *ek, *rows, *fk, *u_dst;  // (heads, chunks, kChunk, c); with decay only
  const float *dr, *xs;                               // (heads, chunks, kChunk, m)
  const float *states, *grads, *whole;                // S_c, dS_c (heads, chunks, c, m); exp(B) (heads, chunks)
  float *d_beta, *d_log_decay;                        // (heads, chunks, kChunk); d_log_decay null: no decay
  int c, m;
};

// The kernel's shared memory: db and <F_t, (U dS^T)_t> per row, one partial sum per warp.
struct RowTermLayout {
  float *db, *f_df, *warp_sums;
  size_t bytes;
  __host__ __device__ explicit RowTermLayout(unsigned char* base = nullptr) {
    tile::Carve carve{base};
    db = carve.take<float>(kChunk);
    f_df = carve.take<float>(kChunk);
    warp_sums = carve.take<float>(tile::kWarps);
    bytes = carve.bytes;
  }
};

// The sum of x over the warp's lanes, in every lane.
__device__ inline float warp_sum(float x) {
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// sum_j x[t][j] y[t][j] over `width` columns of row t of two row-major arrays, in every lane of the warp.
__device__ inline float row_dot(const float* x, const float* y, int width, int t) {
  float sum = 0.f;
  for (int j = threadIdx.x % 32; j < width; j += 32) sum += x[t * width + j] * y[t * width + j];
  return warp_sum(sum);
}

__global__ void __launch_bounds__(tile::kThreads) delta_row_terms_kernel(RowTermArgs a) {
  const RowTermLayout sh(chunk::shared_memory());
  const int64_t index = blockIdx.x;  // (head, chunk)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const bool decay = a.d_log_decay != nullptr;
  const int64_t mats = index * kChunk * kChunk, keys = index * kChunk * a.c, values = index * kChunk * a.m;
  for (int t = warp; t < kChunk; t += tile::kWarps) {
    const float d_beta = row_dot(a.dr + values, a.xs + values, a.m, t) - row_dot(a.na + mats, a.h + mats, kChunk, t);
    if (lane == 0) a.d_beta[index * kChunk + t] = d_beta;
    if (!decay) continue;
    float z = 0.f;  // sum_s Z[t][s] - Z[s][t]
    for (int s = lane; s < kChunk; s += 32) {
      const int64_t ts = mats + t * kChunk + s, st = mats + s * kChunk + t;
      z += a.dp[ts] * a.p[ts] - a.na[ts] * a.a[ts] - a.dp[st] * a.p[st] + a.na[st] * a.a[st];
    }
    z = warp_sum(z);
    const float e_de = row_dot(a.qe + keys, a.dos_st + keys, a.c, t) - row_dot(a.ek + keys, a.rows + keys, a.c, t);
    const float f_df = row_dot(a.fk + keys, a.u_dst + keys, a.c, t);
    if (lane == 0) sh.db[t] = z + e_de - f_df, sh.f_df[t] = f_df;
  }
  if (!decay) return;  // the same in every thread
  float entering = 0.f;  // <S_c, dS_c>
  const int64_t state = index * a.c * a.m;
  for (int i = threadIdx.x; i < a.c * a.m; i += blockDim.x) entering += a.states[state + i] * a.grads[state + i];
  entering = warp_sum(entering);
  if (lane == 0) sh.warp_sums[warp] = entering;
  __syncthreads();
  if (threadIdx.x == 0) {
    float last = 0.f, sum = 0.f;
    for (int w = 0; w < tile::kWarps; ++w) last += sh.warp_sums[w];
    last *= a.whole[index];
    for (int t = 0; t < kChunk; ++t) last += sh.f_df[t];
    for (int t = kChunk - 1; t >= 0; --t) {
      sum += sh.db[t] + (t == kChunk - 1 ? last : 0.f);
      a.d_log_decay[index * kChunk + t] = sum;
    }
  }
}

}  // namespace delta_rows
}  // namespace lintf
