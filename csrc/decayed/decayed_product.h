// Shared declarations of the CPU decayed causal product (its schema in decayed_product.cpp, its
// kernels in cpu/decayed_product_cpu.cpp and one translation unit per vector path,
// cpu/decayed_product_{avx512,avx2,portable}.cpp, instantiating cpu/vector_path.h).
//
// Semantics, for q, k (B, H, N, C), v (B, H, N, M), log_decay a (B, H, N) <= 0 and an optional
// initial state S0 (B, H, C, M):
//   S_i   = exp(a_i) S_{i-1} + k_i v_i^T        (S_{-1} = S0, zeros when absent)
//   out_i = q_i S_i
// The op returns out (v's dtype) and S_{N-1} (the accumulation dtype: fp32, fp64 for fp64 inputs);
// log_decay and S0 come in the accumulation dtype. The backward takes the gradients of out and of
// the final state (absent: zero) and returns dq, dk, dv (input dtype), d log_decay and dS0
// (accumulation dtype; dS0 zeros-based when S0 was absent).
//
// The kernels (cpu/sweeps.h) run the causal product's register-tiled recurrence kChunk (32) positions
// at a time, with the decays moved onto the rows they read: with c_t the cumulative log decay inside a
// chunk and a reference r >= c_t, S_t = exp(c_t - r) A_t where A only adds (exp(r - c_t) k_t) v_t^T and
// out_t = A_t^T (exp(c_t - r) q_t); the stored state is rescaled once per chunk (and within one when
// its decays pass exp(-20), before a row would be scaled up past exp(20)). The backward runs two
// sweeps with O(C M) state: forward (carrying S) for dq, reverse (carrying R = dL/dS) for dk, dv,
// d log_decay and dS0.
//
// Stored states: with a state spacing L (a multiple of kChunk), the forward also writes the state
// entering every span of L positions, S_{jL-1} (B, H, ceil(N / L), C, M; S0 or zeros for j = 0),
// and the backward runs both sweeps span by span from the last: the span's dq from its stored state,
// then its dk, dv, d log_decay in reverse, while the span's rows are still in the caches.
#pragma once

#include "common/cpu/state_args.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

namespace lintf::decayed {

using cpu::Dims;

// Raw pointers of one call beyond the common ones (common/cpu/state_args.h); per head: log_decay,
// d_log_decay (n); the kept chunk states (spans, c, m).
template <typename scalar_t, typename T>
struct Args : cpu::StateArgs<scalar_t, T> {
  const T* log_decay = nullptr;
  T* d_log_decay = nullptr;
  T* chunk_states = nullptr;      // forward: written; backward: read; null: none kept
  int64_t state_spacing = 0;      // positions between the chunk states, a multiple of kChunk
  bool stream_gradients = false;  // backward: dq, dk, dv written past the caches
  int64_t prefetch_chunks = 4;    // how far ahead the sweeps prefetch (common/cpu/tuning.h)
};

using Path = cpu::HeadPath<Args>;

// Null when not compiled into this build (the x86-64 paths elsewhere).
const Path* avx512_path();
const Path* avx2_path();
const Path* portable_path();

}  // namespace lintf::decayed
