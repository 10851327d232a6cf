// Chunked CUDA gated linear attention (semantics in ../gla.h), the parts shared by forward and backward:
// the chunk's gates, the gated tiles, the in-chunk scores, each chunk's own contribution to the state and
// the forward's outputs. Tiles and tensor-core products are the causal kernels' (common/cuda/tile.cuh),
// the scan over chunks the decayed product's (common/cuda/chunk_scan.cuh).
//
// The sequence is cut into chunks of kChunk (64) positions; b_t (one per state row, i.e. key feature) is
// the cumulative log-gate inside the chunk (restarting at each chunk, computed once by the host), B = b_last
// its total (padding positions gate nothing). Key s reaches query t >= s of a chunk through exp(b_t - b_s)
// per feature, so the in-chunk scores A_ts = sum_i q_ti k_si exp(b_ti - b_si) are no matrix product: each
// thread sums them for its pairs with the exponents in log space, every one <= 0 whatever the gates
// (q exp(b) . k exp(-b) would overflow for strong gates). Forward:
//   1. added_state_kernel with FeatureGates, one block per (head, chunk, value tile):
//      added_c = (K o exp(B - b))^T V;
//   2. chunk_scan_kernel, one thread per (head, state entry): S_c (entering chunk c) in place,
//      S_{c+1} = diag(exp(B_c)) S_c + added_c from S_0 = the initial state, and the final state;
//   3. gla_output_kernel, one block per (head, chunk, value tile):
//        out_c = scale (A V + (Q o exp(b)) S_c).
// States stay fp32 in global memory; tiles enter the tensor cores in the input's type.
#pragma once

#include "common/cuda/chunk_added.cuh"
#include "common/cuda/chunk_grid.cuh"
#include "common/cuda/chunk_scan.cuh"
#include "common/cuda/chunk_tiles.cuh"

namespace lintf {
namespace gla_chunk {

using chunk::Block;
using chunk::Dims;
using tile::Causal;
using tile::kChunk;
using tile::padded_ld;

// log2(e): the kernels keep b in base 2, so every decay is one exp2f (a single special-function
// instruction and a little range handling, where expf needs a longer exact sequence).
constexpr float kLog2e = 1.4426950408889634f;

// The chunk's b (kChunk x cp, fp32, padding features 0) in base 2, b log2(e), from the host's in-chunk
// cumulative log-gates (heads, chunks, kChunk, c).
__device__ inline void load_gates(const float* cumulative, const Dims& d, const Block& block, float* b) {
  const float* chunk_b = cumulative + block.state * int64_t(kChunk) * d.c;
  const int ld = padded_ld<float>(d.cp);
  tile::load_tile(chunk_b, d.c, kChunk, d.c, static_cast<const float*>(nullptr), b, ld, kChunk, d.cp);
  __syncthreads();
  for (int e = threadIdx.x; e < kChunk * d.cp; e += blockDim.x) b[(e / d.cp) * ld + e % d.cp] *= kLog2e;
}

// f (kChunk x cp, fp32) = the chunk's rows of x ((heads * n, c) row-major), zeros past
// them, times exp(b) (to_end false: the state entering the chunk reaches row t) or exp(B - b) (to_end:
// row t reaches the state leaving it), feature by feature; b in base 2 (load_gates). Every exponent is <= 0.
template <typename T>
__device__ void load_gated(const T* x, const Dims& d, const Block& block, const float* b, bool to_end, float* f) {
  const int ldf = padded_ld<float>(d.cp), ldb = padded_ld<float>(d.cp);
  chunk::load_features(x, d, block, f);
  __syncthreads();
  for (int e = threadIdx.x; e < kChunk * d.cp; e += blockDim.x) {
    const int t = e / d.cp, i = e % d.cp;
    const float exponent = to_end ? b[(kChunk - 1) * ldb + i] - b[t * ldb + i] : b[t * ldb + i];
    f[t * ldf + i] *= exp2f(exponent);
  }
}

// c (kChunk x kChunk, fp32) = the scores A_ts = sum_i q_ti k_si exp(b_ti - b_si) for s <= t, zero above;
// q, k shared tiles of T (leading dimension padded_ld<T>(cp)).
template <typename T>
__device__ void gated_scores(const T* q, const T* k, const float* b, const Dims& d, float* c, int ldc) {
  const int ld = padded_ld<T>(d.cp), ldb = padded_ld<float>(d.cp);
  for (int e = threadIdx.x; e < kChunk * kChunk; e += blockDim.x) {
    const int t = e / kChunk, s = e % kChunk;
    float sum = 0.f;
    for (int i = 0; s <= t && i < d.c; ++i) {
      sum += tile::to_float(q[t * ld + i]) * tile::to_float(k[s * ld + i]) * exp2f(b[t * ldb + i] - b[s * ldb + i]);
    }
    c[t * ldc + s] = sum;
  }
}

// ---- step 1: what each chunk adds to the state (common/cuda/chunk_added.cuh) --------------------------

// GLA's weights of X_c in what the chunk adds: one per row and feature, w_ti = exp(B_i - b_ti) or exp(b_ti).
struct FeatureGates {
  __host__ __device__ static int floats(int cp) { return kChunk * padded_ld<float>(cp); }  // b

  // b, the cumulative log-gates inside each chunk: (heads, chunks, kChunk, c) fp32, padding positions adding 0.
  static at::Tensor cumulative(const Dims& d, const at::Tensor& log_gate) {
    const int64_t padding = int64_t(d.chunks) * kChunk - d.n;
    const auto padded = at::constant_pad_nd(log_gate.to(at::kFloat).reshape({d.heads, d.n, d.c}), {0, 0, 0, padding});
    return padded.reshape({d.heads, d.chunks, kChunk, d.c}).cumsum(2).contiguous();
  }

  // Where the scan finds each chunk's total log-gates: the last row of its cumulative ones, one per state row.
  static chunk::ScanDecays scan_decays(const Dims& d, const at::Tensor& cumulative) {
    return {cumulative.data_ptr<float>() + (kChunk - 1) * int64_t(d.c), kChunk * int64_t(d.c), d.m};
  }

  // One decay a state row: its m entries share it (the gate-gradient terms x: (heads, chunks, c)).
  static int64_t entries_per_decay(const Dims& d) { return d.m; }

  template <typename T>
  __device__ static void weigh(const chunk::AddedArgs<T>& args, const Dims& d, const Block& block, float* b,
                               float* f) {
    load_gates(args.cumulative, d, block, b);
    __syncthreads();
    load_gated(args.x, d, block, b, args.to_end, f);
  }
};

template <typename T>
using StateLayout = chunk::AddedLayout<T, FeatureGates>;

// ---- step 3: the forward's outputs ----------------------------------------------------------------------

template <typename T>
struct OutputArgs {
  const T *q, *k, *v;       // (heads, n, c), (heads, n, c), (heads, n, m)
  const float* cumulative;  // (heads, chunks, kChunk, c)
  const float* states;      // S_c entering each chunk: (heads, chunks, c, m)
  float scale;
  T* out;                   // (heads, n, m)
};

// The fp32 staging tile of the output kernel: the scores, the gated queries, a state tile, the outputs.
__host__ __device__ inline int output_staging(int cp, int mt) {
  return max(max(kChunk * padded_ld<float>(kChunk), kChunk * padded_ld<float>(cp)),
             max(cp, kChunk) * padded_ld<float>(mt));
}

template <typename T>
struct OutputLayout {
  T *q, *ks, *v, *a;
  float *b, *f, *scratch;
  size_t bytes;
  __host__ __device__ OutputLayout(int cp, int mt, unsigned char* base = nullptr) {
    tile::Carve carve{base};
    q = carve.take<T>(kChunk * padded_ld<T>(cp));                                // q, later q o exp(b)
    ks = carve.take<T>(max(kChunk * padded_ld<T>(cp), cp * padded_ld<T>(mt)));  // k, later the state
    v = carve.take<T>(kChunk * padded_ld<T>(mt));
    a = carve.take<T>(kChunk * padded_ld<T>(kChunk));
    b = carve.take<float>(kChunk * padded_ld<float>(cp));
    f = carve.take<float>(output_staging(cp, mt));
    scratch = carve.take<float>(tile::kWarps);
    bytes = carve.bytes;
  }
};

template <typename T, bool Split>
__global__ void __launch_bounds__(tile::kThreads) gla_output_kernel(OutputArgs<T> args, Dims d) {
  const auto sh = chunk::shared_tiles<OutputLayout<T>>(d.cp, d.mt);
  const Block block(d, true);
  const int ldq = padded_ld<T>(d.cp), lds = padded_ld<T>(d.mt), lda = padded_ld<T>(kChunk);
  const int ld_scores = padded_ld<float>(kChunk), ldf = padded_ld<float>(d.mt);

  load_gates(args.cumulative, d, block, sh.b);
  chunk::load_features(args.q, d, block, sh.q);
  chunk::load_features(args.k, d, block, sh.ks);
  chunk::load_values(args.v, d, block, block.value_tile, sh.v);
  __syncthreads();
  gated_scores(sh.q, sh.ks, sh.b, d, sh.f, ld_scores);
  __syncthreads();
  const float a_scale = tile::to_operand(sh.f, ld_scores, sh.a, lda, kChunk, kChunk, sh.scratch);
  __syncthreads();
  load_gated(args.q, d, block, sh.b, false, sh.f);
  __syncthreads();
  // q o exp(b) takes q's tile
  const float q_scale = tile::to_operand(sh.f, padded_ld<float>(d.cp), sh.q, ldq, kChunk, d.cp, sh.scratch);
  __syncthreads();
  // k is no longer needed: the state takes its tile
  const float s_scale = chunk::load_state_tile(args.states, d, block.state, block.value_tile, sh.ks, chunk::kNoLow<T>,
                                               sh.f, ldf, sh.scratch);
  // out (kChunk x mt) = scale ((q o exp(b)) S + A v)
  tile::block_mma<T, Split, true, true>(sh.q, ldq, sh.ks, lds, sh.f, ldf, kChunk, d.mt, d.cp, Causal::kNone, 0.f,
                                        q_scale * s_scale * args.scale);
  __syncthreads();
  tile::block_mma<T, Split, true, true>(sh.a, lda, sh.v, lds, sh.f, ldf, kChunk, d.mt, kChunk, Causal::kLowerA, 1.f,
                                        a_scale * args.scale);
  __syncthreads();
  tile::store_tile(sh.f, ldf, block.rows, block.cols, args.out + block.row0 * d.m + block.m0, d.m);
}

}  // namespace gla_chunk
}  // namespace lintf
