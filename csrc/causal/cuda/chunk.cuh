// Chunked CUDA causal product, the parts shared by forward and backward: the problem's dimensions, each
// chunk's own state (a tensor-core product X^T Y), the scan over chunks, and the forward's outputs.
//
// The sequence is cut into chunks of kChunk positions. The forward is three parallel steps:
//   1. chunk_state_kernel, one block per (head, chunk, value tile): dS_c = K_c^T V_c, dz_c = K_c^T 1;
//   2. state_scan_kernel, one thread per (head, state entry) of kv and z in one launch:
//      S_c = S0 + sum_{c' < c} dS_c' in place (an exclusive prefix over chunks) and the final state S0 + sum_c dS_c;
//   3. chunk_output_kernel, one block per (head, chunk, value tile):
//        out_c = (mask(Q_c K_c^T) V_c + Q_c S_c) / (rowsum(mask(Q_c K_c^T)) + Q_c z_c + eps).
// Work is spread over heads x chunks x value tiles, so a few heads of a long sequence fill the GPU.
// States stay fp32 in global memory; every tile enters the tensor cores in the input's type (see
// tile.cuh for fp16 scaling and fp32 as TF32/3xTF32).
#pragma once

#include "common/cuda/chunk_grid.cuh"
#include "common/cuda/chunk_tiles.cuh"

namespace lintf {
namespace chunk {

using tile::Causal;
using tile::kChunk;
using tile::padded_ld;

// ---- step 1: the state of each chunk on its own ------------------------------------------------------

// Inputs of chunk_state_kernel: with X' = diag(row_scale) X_c rounded to the operand type once,
// kv_c = X'^T Y_c and z_c = X'^T w (w: the rows' weights, or ones). Forward: X = K, Y = V. Backward's
// reverse sweep: X = Q, Y = grad_out, row_scale = 1 / denominator, w = -(grad_out . out): kv and z then
// come from the same rounded X', so the terms in which they cancel (dk = V dS^T + dz) cancel exactly.
template <typename T>
struct StateArgs {
  const T* x;                // (heads, n, c)
  const T* y;                // (heads, n, m)
  const float* row_scale;    // (heads, n) or null
  const float* weights;      // (heads, n) or null: unit weights when unit_weights, else no z
  bool unit_weights;
  float* kv;                 // (heads, chunks, c, m)
  float* z;                  // (heads, chunks, c), untouched when there are no weights
};

template <typename T>
struct StateLayout {
  T *x, *y;
  float *f, *w, *scratch;
  size_t bytes;
  __host__ __device__ StateLayout(int cp, int mt, unsigned char* base = nullptr) {
    tile::Carve carve{base};
    x = carve.take<T>(kChunk * padded_ld<T>(cp));
    y = carve.take<T>(kChunk * padded_ld<T>(mt));
    f = carve.take<float>(max(kChunk * padded_ld<float>(cp), cp * padded_ld<float>(mt)));  // x staged, then kv
    w = carve.take<float>(kChunk);  // the rows' weights of z
    scratch = carve.take<float>(tile::kWarps);
    bytes = carve.bytes;
  }
};

template <typename T, bool Split>
__global__ void __launch_bounds__(tile::kThreads) chunk_state_kernel(StateArgs<T> args, Dims d) {
  const auto sh = shared_tiles<StateLayout<T>>(d.cp, d.mt);
  const Block b(d, true);
  // the chunk's rows and state computed here and where used rather than read from b: held from the start, they
  // spill (ptxas)
  const int rows = d.chunk_rows(b.chunk), cols = d.tile_cols(b.value_tile), m0 = b.value_tile * d.mt;
  const int64_t row0 = b.head * d.n + int64_t(b.chunk) * kChunk;
  const bool with_z = b.value_tile == 0 && (args.unit_weights || args.weights != nullptr);
  const int ldx = padded_ld<T>(d.cp), ldy = padded_ld<T>(d.mt), ldfx = padded_ld<float>(d.cp);
  const int ldf = padded_ld<float>(d.mt);

  tile::load_tile(args.x + row0 * d.c, d.c, rows, d.c, args.row_scale ? args.row_scale + row0 : nullptr, sh.f, ldfx,
                  kChunk, d.cp);
  load_values(args.y, d, b, b.value_tile, sh.y);
  if (with_z) {
    for (int t = threadIdx.x; t < kChunk; t += blockDim.x) {
      sh.w[t] = t >= rows ? 0.f : args.unit_weights ? 1.f : args.weights[row0 + t];
    }
  }
  __syncthreads();
  const float x_scale = tile::to_operand(sh.f, ldfx, sh.x, ldx, kChunk, d.cp, sh.scratch);
  __syncthreads();
  // kv (cp x mt) = x^T y: x read as a column-major (cp x kChunk) operand
  tile::block_mma<T, Split, false, true>(sh.x, ldx, sh.y, ldy, sh.f, ldf, d.cp, d.mt, kChunk, Causal::kNone, 0.f,
                                         x_scale);
  __syncthreads();
  float* kv = args.kv + (b.head * d.chunks + b.chunk) * int64_t(d.c) * d.m + m0;
  for (int e = threadIdx.x; e < d.c * cols; e += blockDim.x) {
    const int i = e / cols, j = e % cols;
    kv[int64_t(i) * d.m + j] = sh.f[i * ldf + j];
  }
  if (with_z) {
    float* z = args.z + (b.head * d.chunks + b.chunk) * int64_t(d.c);
    for (int i = threadIdx.x; i < d.c; i += blockDim.x) {
      float sum = 0.f;
      for (int t = 0; t < rows; ++t) sum += tile::to_float(sh.x[t * ldx + i]) * sh.w[t];
      z[i] = sum * x_scale;
    }
  }
}

// ---- step 2: scan over chunks ---------------------------------------------------------------------------

// One scanned tensor: states (heads, chunks, width) in place, start (heads, width) or null (0), total
// (heads, width) or null.
struct ScanPart {
  float* states;
  const float* start;
  float* total;
  int64_t width;
};

// Both parts in one launch (the state kv and its normaliser z scan together): chunk c's entry becomes start
// + the entries of the chunks before it (after it when reverse); total, if given, receives start + all.
// Threads 0 .. heads * first.width - 1 take the first part, the rest the second (width 0: none).
__global__ void state_scan_kernel(ScanPart first, ScanPart second, int64_t heads, int64_t chunks, bool reverse) {
  int64_t index = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const bool in_first = index < heads * first.width;
  const ScanPart part = in_first ? first : second;
  if (!in_first) index -= heads * first.width;
  if (index >= heads * part.width) return;
  const int64_t head = index / part.width;
  float* base = part.states + head * chunks * part.width + index % part.width;
  float running = part.start != nullptr ? part.start[index] : 0.f;
  constexpr int kBatch = 8;  // loads in flight per thread
  for (int64_t s0 = 0; s0 < chunks; s0 += kBatch) {
    float values[kBatch];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int64_t s = s0 + i, chunk = reverse ? chunks - 1 - s : s;
      values[i] = s < chunks ? base[chunk * part.width] : 0.f;
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int64_t s = s0 + i, chunk = reverse ? chunks - 1 - s : s;
      if (s < chunks) base[chunk * part.width] = running;
      running += values[i];
    }
  }
  if (part.total != nullptr) part.total[index] = running;
}

// ---- step 3: the forward's outputs ----------------------------------------------------------------------

template <typename T>
struct OutputArgs {
  const T *q, *k, *v;        // (heads, n, c), (heads, n, c), (heads, n, m)
  const float *kv, *z;       // chunk states after the scan: (heads, chunks, c, m), (heads, chunks, c)
  T* out;                    // (heads, n, m)
  float* denominator;        // (heads, n), written when normalize
  float eps;
  bool normalize;
};

template <typename T>
struct OutputLayout {
  T *q, *ks, *v, *a;
  float *f, *z, *den, *scratch;
  size_t bytes;
  __host__ __device__ OutputLayout(int cp, int mt, unsigned char* base = nullptr) {
    tile::Carve carve{base};
    q = carve.take<T>(kChunk * padded_ld<T>(cp));
    ks = carve.take<T>(max(kChunk * padded_ld<T>(cp), cp * padded_ld<T>(mt)));  // k, later the state
    v = carve.take<T>(kChunk * padded_ld<T>(mt));
    a = carve.take<T>(kChunk * padded_ld<T>(kChunk));
    f = carve.take<float>(max(kChunk, cp) * padded_ld<float>(max(kChunk, mt)));
    z = carve.take<float>(cp);
    den = carve.take<float>(kChunk);
    scratch = carve.take<float>(tile::kWarps);
    bytes = carve.bytes;
  }
};

template <typename T, bool Split>
__global__ void __launch_bounds__(tile::kThreads) chunk_output_kernel(OutputArgs<T> args, Dims d) {
  const auto sh = shared_tiles<OutputLayout<T>>(d.cp, d.mt);
  const Block b(d, true);
  const int ldq = padded_ld<T>(d.cp), lds = padded_ld<T>(d.mt), lda = padded_ld<T>(kChunk);
  const int ldf = padded_ld<float>(max(kChunk, d.mt));

  load_features(args.q, d, b, sh.q);
  load_features(args.k, d, b, sh.ks);
  load_values(args.v, d, b, b.value_tile, sh.v);
  for (int i = threadIdx.x; i < d.cp; i += blockDim.x) {
    sh.z[i] = args.normalize && i < d.c ? args.z[b.state * d.c + i] : 0.f;
  }
  __syncthreads();
  // similarities (kChunk x kChunk) = q k^T, k read as a column-major (cp x kChunk) operand
  tile::block_mma<T, Split, true, false>(sh.q, ldq, sh.ks, ldq, sh.f, ldf, kChunk, kChunk, d.cp, Causal::kLowerOutput,
                                         0.f, 1.f);
  __syncthreads();
  tile::causal_mask(sh.f, ldf, kChunk, nullptr, nullptr);
  __syncthreads();
  if (args.normalize) {
    for (int i = threadIdx.x; i < kChunk; i += blockDim.x) {
      float sum = args.eps;
      for (int j = 0; j <= i; ++j) sum += sh.f[i * ldf + j];
      for (int j = 0; j < d.cp; ++j) sum += tile::to_float(sh.q[i * ldq + j]) * sh.z[j];
      sh.den[i] = sum;
    }
  }
  const float a_scale = tile::to_operand(sh.f, ldf, sh.a, lda, kChunk, kChunk, sh.scratch);
  __syncthreads();
  // k is no longer needed: the state takes its tile
  const float s_scale = load_state_tile(args.kv, d, b.state, b.value_tile, sh.ks, kNoLow<T>, sh.f, ldf, sh.scratch);
  // numerator (kChunk x mt) = mask(q k^T) v + q S
  tile::block_mma<T, Split, true, true>(sh.a, lda, sh.v, lds, sh.f, ldf, kChunk, d.mt, kChunk, Causal::kLowerA, 0.f,
                                        a_scale);
  __syncthreads();
  tile::block_mma<T, Split, true, true>(sh.q, ldq, sh.ks, lds, sh.f, ldf, kChunk, d.mt, d.cp, Causal::kNone, 1.f,
                                        s_scale);
  __syncthreads();
  for (int e = threadIdx.x; e < b.rows * b.cols; e += blockDim.x) {
    const int i = e / b.cols, j = e % b.cols;
    const float value = sh.f[i * ldf + j];
    args.out[(b.row0 + i) * d.m + b.m0 + j] = tile::from_float<T>(args.normalize ? value / sh.den[i] : value);
  }
  if (args.normalize && b.value_tile == 0) {
    for (int i = threadIdx.x; i < b.rows; i += blockDim.x) args.denominator[b.row0 + i] = sh.den[i];
  }
}

}  // namespace chunk
}  // namespace lintf
