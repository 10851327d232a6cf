// The sequential sweeps of the CUDA delta rule (the rest of its chunked form: chunk.cuh, aten.h): one
// block per (head, value tile) walks the chunks in order carrying its columns of the state, the one step
// that cannot run in parallel because every chunk's update reads the state it enters with. Both sweeps run
// fp32 tiles on the tensor cores (3xTF32, or TF32 when torch allows TF32 matmuls) over operands prepared per
// chunk (chunk.cuh, backward_operands.cuh; all (heads, chunks, kChunk, .) fp32, padded rows zero):
//   forward:  U_c = U0_c - W_c S_c,  S_{c+1} = exp(B_c) S_c + F_c^T U_c
//             (W = T diag(beta) diag(exp(b)) K, U0 = T diag(beta) V, F = diag(exp(B - b)) K; writes S_c, U_c)
//   backward: dR_c = R0_c + Rt_c dS,  dS <- exp(B_c) dS + Qe_c^T dO_c - Kb_c^T dR_c, from the last chunk
//             (R0 = T^T P^T dO, Rt = T^T F, Qe = diag(exp(b)) Q, Kb = diag(beta exp(b)) K; writes dR_c and
//             dS after chunk c, then dL/dS_0)
// with T = (I + A)^{-1} the chunk's UT transform and B_c its total log-decay (semantics: ../delta_rule.h).
#pragma once

#include "common/cuda/chunk_grid.cuh"

namespace lintf {
namespace delta_sweep {

using tile::Causal;
using tile::kChunk;
using tile::padded_ld;

// Where one call's sweep reads and writes: chunk-major (heads, chunks, rows, .) fp32 arrays.
struct SweepArgs {
  const float *prepared, *left, *right, *third;  // forward: U0, W, F, -; backward: R0, Rt, Qe, Kb
  const float* dos;                              // backward: dO = scale * grad_out, (heads, chunks, kChunk, m)
  const float* whole;                            // exp(B_c): (heads, chunks)
  const float* start;                            // S_0 (forward) or dL/dS_N (backward), (heads, c, m); null: zeros
  float *states, *rows, *last;                   // S_c or dS after c (heads, chunks, c, m); U_c or dR_c; S_N or dS_0
  int64_t heads;
  int c, m, cp, mt, chunks, value_tiles;
};

struct SweepLayout {
  float *state, *left, *right, *third, *f, *g;
  size_t bytes;
  __host__ __device__ SweepLayout(int cp, int mt, unsigned char* base = nullptr) {
    tile::Carve carve{base};
    state = carve.take<float>(cp * padded_ld<float>(mt));
    left = carve.take<float>(kChunk * padded_ld<float>(cp));
    right = carve.take<float>(kChunk * padded_ld<float>(cp));
    third = carve.take<float>(kChunk * padded_ld<float>(cp));
    f = carve.take<float>(kChunk * padded_ld<float>(mt));
    g = carve.take<float>(kChunk * padded_ld<float>(mt));
    bytes = carve.bytes;
  }
};

// One chunk's (kChunk x c) operand of a (heads, chunks, kChunk, c) array into a (kChunk x cp) tile.
__device__ inline void load_rows(const float* base, const SweepArgs& a, int64_t chunk_index, float* dst) {
  tile::load_tile(base + chunk_index * kChunk * a.c, a.c, kChunk, a.c, static_cast<const float*>(nullptr), dst,
                  padded_ld<float>(a.cp), kChunk, a.cp);
}

// One chunk's value-tile columns of a (heads, chunks, kChunk, m) array into a (kChunk x mt) tile.
__device__ inline void load_values(const float* base, const SweepArgs& a, int64_t chunk_index, int m0, int cols,
                                   float* dst) {
  tile::load_tile(base + chunk_index * kChunk * a.m + m0, a.m, kChunk, cols, static_cast<const float*>(nullptr), dst,
                  padded_ld<float>(a.mt), kChunk, a.mt);
}

// The (c x value tile) block of one (c, m) matrix of `base` (null: zeros) into the state tile.
__device__ inline void load_state(const float* base, const SweepArgs& a, int64_t matrix, int m0, int cols, float* s) {
  const int ld = padded_ld<float>(a.mt);
  if (base == nullptr) {
    for (int e = threadIdx.x; e < a.cp * ld; e += blockDim.x) s[e] = 0.f;
    return;
  }
  tile::load_tile(base + matrix * a.c * a.m + m0, a.m, a.c, cols, static_cast<const float*>(nullptr), s, ld, a.cp,
                  a.mt);
}

template <bool Split>
__global__ void __launch_bounds__(tile::kThreads) delta_forward_sweep_kernel(SweepArgs a) {
  const auto sh = chunk::shared_tiles<SweepLayout>(a.cp, a.mt);
  float *s = sh.state, *w = sh.left, *fk = sh.right, *u = sh.f;
  const int64_t head = blockIdx.x / a.value_tiles;
  const int value_tile = static_cast<int>(blockIdx.x % a.value_tiles), m0 = value_tile * a.mt;
  const int cols = min(a.mt, a.m - m0), lds = padded_ld<float>(a.mt), ldk = padded_ld<float>(a.cp);
  load_state(a.start, a, head, m0, cols, s);
  for (int chunk = 0; chunk < a.chunks; ++chunk) {
    const int64_t index = head * a.chunks + chunk;
    __syncthreads();  // the previous chunk's update of s is done
    tile::store_tile(s, lds, a.c, cols, a.states + index * a.c * a.m + m0, a.m);
    load_rows(a.left, a, index, w);
    load_rows(a.right, a, index, fk);
    load_values(a.prepared, a, index, m0, cols, u);
    __syncthreads();
    // U = U0 - W S (kChunk x mt)
    tile::block_mma<float, Split, true, true>(w, ldk, s, lds, u, lds, kChunk, a.mt, a.cp, Causal::kNone, 1.f, -1.f);
    __syncthreads();
    tile::store_tile(u, lds, kChunk, cols, a.rows + index * kChunk * a.m + m0, a.m);
    // S = exp(B) S + F^T U, F read as a column-major (cp x kChunk) operand
    tile::block_mma<float, Split, false, true>(fk, ldk, u, lds, s, lds, a.cp, a.mt, kChunk, Causal::kNone,
                                               a.whole[index], 1.f);
  }
  __syncthreads();
  tile::store_tile(s, lds, a.c, cols, a.last + head * a.c * a.m + m0, a.m);
}

template <bool Split>
__global__ void __launch_bounds__(tile::kThreads) delta_backward_sweep_kernel(SweepArgs a) {
  const auto sh = chunk::shared_tiles<SweepLayout>(a.cp, a.mt);
  float *ds = sh.state, *rt = sh.left, *qe = sh.right, *kb = sh.third, *dr = sh.f, *dos = sh.g;
  const int64_t head = blockIdx.x / a.value_tiles;
  const int value_tile = static_cast<int>(blockIdx.x % a.value_tiles), m0 = value_tile * a.mt;
  const int cols = min(a.mt, a.m - m0), lds = padded_ld<float>(a.mt), ldk = padded_ld<float>(a.cp);
  load_state(a.start, a, head, m0, cols, ds);
  for (int chunk = a.chunks - 1; chunk >= 0; --chunk) {
    const int64_t index = head * a.chunks + chunk;
    __syncthreads();  // the later chunk's update of ds is done
    tile::store_tile(ds, lds, a.c, cols, a.states + index * a.c * a.m + m0, a.m);
    load_rows(a.left, a, index, rt);
    load_rows(a.right, a, index, qe);
    load_rows(a.third, a, index, kb);
    load_values(a.prepared, a, index, m0, cols, dr);
    load_values(a.dos, a, index, m0, cols, dos);
    __syncthreads();
    // dR = R0 + Rt dS (kChunk x mt)
    tile::block_mma<float, Split, true, true>(rt, ldk, ds, lds, dr, lds, kChunk, a.mt, a.cp, Causal::kNone, 1.f, 1.f);
    __syncthreads();
    tile::store_tile(dr, lds, kChunk, cols, a.rows + index * kChunk * a.m + m0, a.m);
    // dS = exp(B) dS + Qe^T dO - Kb^T dR
    tile::block_mma<float, Split, false, true>(qe, ldk, dos, lds, ds, lds, a.cp, a.mt, kChunk, Causal::kNone,
                                               a.whole[index], 1.f);
    __syncthreads();
    tile::block_mma<float, Split, false, true>(kb, ldk, dr, lds, ds, lds, a.cp, a.mt, kChunk, Causal::kNone, 1.f, -1.f);
  }
  __syncthreads();
  tile::store_tile(ds, lds, a.c, cols, a.last + head * a.c * a.m + m0, a.m);
}

}  // namespace delta_sweep
}  // namespace lintf
