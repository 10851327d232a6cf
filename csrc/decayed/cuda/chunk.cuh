// Chunked CUDA decayed causal product (semantics in ../decayed_product.h), the parts shared by forward and
// backward: the chunk's decays, each chunk's own contribution to the state, the decayed scan over chunks,
// and the forward's outputs. Tiles and tensor-core products are the causal kernels' (common/cuda/tile.cuh).
//
// The sequence is cut into chunks of kChunk (64) positions; b_t is the cumulative log-decay inside the
// chunk (restarting at each chunk, computed once by the host), B = b_{kChunk-1} its total (padding
// positions decay nothing), D[t][s] = exp(b_t - b_s) for s <= t. Every exponent is <= 0. Forward:
//   1. added_state_kernel with RowDecays, one block per (head, chunk, value tile):
//      added_c = (diag(exp(B - b)) K)^T V;
//   2. chunk_scan_kernel, one thread per (head, state entry): S_c (entering chunk c) in place,
//      S_{c+1} = exp(B_c) S_c + added_c from S_0 = the initial state, and the final state;
//   3. decayed_output_kernel, one block per (head, chunk, value tile):
//        out_c = ((Q K^T) o D) V + diag(exp(b)) Q S_c.
// States stay fp32 in global memory; tiles enter the tensor cores in the input's type.
#pragma once

#include "common/cuda/chunk_added.cuh"
#include "common/cuda/chunk_grid.cuh"
#include "common/cuda/chunk_scan.cuh"
#include "common/cuda/chunk_tiles.cuh"

#include <limits>

namespace lintf {
namespace decayed_chunk {

using chunk::Block;
using chunk::Dims;
using tile::Causal;
using tile::kChunk;
using tile::padded_ld;

// exp(b_t), exp(B - b_t) and b_t of one chunk in shared memory (kFloats floats from `at`), from the host's
// in-chunk cumulative log-decays (heads * chunks * kChunk, padded).
struct Decays {
  static constexpr int kFloats = 3 * kChunk;
  float *b, *to_start, *to_end;

  __device__ explicit Decays(float* at) : b(at), to_start(at + kChunk), to_end(at + 2 * kChunk) {}

  __device__ void load(const float* cumulative, const Dims& d, const Block& block) {
    const float* chunk_b = cumulative + block.state * int64_t(kChunk);
    const float total = chunk_b[kChunk - 1];
    for (int t = threadIdx.x; t < kChunk; t += blockDim.x) {
      b[t] = chunk_b[t];
      to_start[t] = expf(chunk_b[t]);
      to_end[t] = expf(total - chunk_b[t]);
    }
  }
};

// c (kChunk x kChunk, fp32) o= D: c_ts exp(b_t - b_s) for s <= t, zero above the diagonal.
__device__ inline void decay_mask(float* c, int ld, const float* b) {
  for (int e = threadIdx.x; e < kChunk * kChunk; e += blockDim.x) {
    const int t = e / kChunk, s = e % kChunk;
    c[t * ld + s] = s > t ? 0.f : c[t * ld + s] * expf(b[t] - b[s]);
  }
}

// c (rows x cols, fp32) = diag(w) c.
__device__ inline void scale_rows(float* c, int ld, int rows, int cols, const float* w) {
  for (int e = threadIdx.x; e < rows * cols; e += blockDim.x) c[(e / cols) * ld + e % cols] *= w[e / cols];
}

// ---- step 1: what each chunk adds to the state (common/cuda/chunk_added.cuh) --------------------------

// The decayed product's weights of X_c in what the chunk adds: one per row, w_t = exp(B - b_t) or exp(b_t).
struct RowDecays {
  __host__ __device__ static int floats(int) { return Decays::kFloats; }

  // b_t, the cumulative log-decay inside each chunk: (heads, chunks, kChunk) fp32, padding positions adding 0.
  static at::Tensor cumulative(const Dims& d, const at::Tensor& log_decay) {
    const int64_t padding = int64_t(d.chunks) * kChunk - d.n;
    const auto flat = log_decay.to(at::kFloat).reshape({d.heads, d.n});
    return at::constant_pad_nd(flat, {0, padding}).reshape({d.heads, d.chunks, kChunk}).cumsum(2).contiguous();
  }

  // Where the scan finds each chunk's total log-decay: the last of its in-chunk cumulative ones.
  static chunk::ScanDecays scan_decays(const Dims&, const at::Tensor& cumulative) {
    return {cumulative.data_ptr<float>() + (kChunk - 1), kChunk, std::numeric_limits<int64_t>::max()};
  }

  // One decay a chunk: all c * m entries share it (the decay-gradient terms x: (heads, chunks)).
  static int64_t entries_per_decay(const Dims& d) { return int64_t(d.c) * d.m; }

  template <typename T>
  __device__ static void weigh(const chunk::AddedArgs<T>& args, const Dims& d, const Block& b, float* weights,
                               float* f) {
    Decays decays(weights);
    decays.load(args.cumulative, d, b);
    __syncthreads();
    chunk::load_features(args.x, d, b, f, args.to_end ? decays.to_end : decays.to_start);
  }
};

template <typename T>
using StateLayout = chunk::AddedLayout<T, RowDecays>;

// ---- step 2: the decayed scan over chunks (common/cuda/chunk_scan.cuh) ------------------------------

// ---- step 3: the forward's outputs ----------------------------------------------------------------------

template <typename T>
struct OutputArgs {
  const T *q, *k, *v;       // (heads, n, c), (heads, n, c), (heads, n, m)
  const float* cumulative;  // (heads, chunks, kChunk)
  const float* states;      // S_c entering each chunk: (heads, chunks, c, m)
  T* out;                   // (heads, n, m)
};

template <typename T>
struct OutputLayout {
  T *q, *ks, *v, *a;
  float *f, *decays, *scratch;
  size_t bytes;
  __host__ __device__ OutputLayout(int cp, int mt, unsigned char* base = nullptr) {
    tile::Carve carve{base};
    q = carve.take<T>(kChunk * padded_ld<T>(cp));
    ks = carve.take<T>(max(kChunk * padded_ld<T>(cp), cp * padded_ld<T>(mt)));  // k, later the state
    v = carve.take<T>(kChunk * padded_ld<T>(mt));
    a = carve.take<T>(kChunk * padded_ld<T>(kChunk));
    f = carve.take<float>(max(kChunk, cp) * padded_ld<float>(max(kChunk, mt)));
    decays = carve.take<float>(Decays::kFloats);
    scratch = carve.take<float>(tile::kWarps);
    bytes = carve.bytes;
  }
};

template <typename T, bool Split>
__global__ void __launch_bounds__(tile::kThreads) decayed_output_kernel(OutputArgs<T> args, Dims d) {
  const auto sh = chunk::shared_tiles<OutputLayout<T>>(d.cp, d.mt);
  Decays decays(sh.decays);
  const Block b(d, true);
  const int ldq = padded_ld<T>(d.cp), lds = padded_ld<T>(d.mt), lda = padded_ld<T>(kChunk);
  const int ldf = padded_ld<float>(max(kChunk, d.mt));

  decays.load(args.cumulative, d, b);
  chunk::load_features(args.q, d, b, sh.q);
  chunk::load_features(args.k, d, b, sh.ks);
  chunk::load_values(args.v, d, b, b.value_tile, sh.v);
  __syncthreads();
  // (q k^T) o D (kChunk x kChunk), k read as a column-major (cp x kChunk) operand
  tile::block_mma<T, Split, true, false>(sh.q, ldq, sh.ks, ldq, sh.f, ldf, kChunk, kChunk, d.cp, Causal::kLowerOutput,
                                         0.f, 1.f);
  __syncthreads();
  decay_mask(sh.f, ldf, decays.b);
  __syncthreads();
  const float a_scale = tile::to_operand(sh.f, ldf, sh.a, lda, kChunk, kChunk, sh.scratch);
  __syncthreads();
  // k is no longer needed: the state takes its tile
  const float s_scale = chunk::load_state_tile(args.states, d, b.state, b.value_tile, sh.ks, chunk::kNoLow<T>, sh.f,
                                               ldf, sh.scratch);
  // out (kChunk x mt) = diag(exp(b)) q S + ((q k^T) o D) v
  tile::block_mma<T, Split, true, true>(sh.q, ldq, sh.ks, lds, sh.f, ldf, kChunk, d.mt, d.cp, Causal::kNone, 0.f,
                                        s_scale);
  __syncthreads();
  scale_rows(sh.f, ldf, kChunk, d.mt, decays.to_start);
  __syncthreads();
  tile::block_mma<T, Split, true, true>(sh.a, lda, sh.v, lds, sh.f, ldf, kChunk, d.mt, kChunk, Causal::kLowerA, 1.f,
                                        a_scale);
  __syncthreads();
  tile::store_tile(sh.f, ldf, b.rows, b.cols, args.out + b.row0 * d.m + b.m0, d.m);
}

}  // namespace decayed_chunk
}  // namespace lintf
