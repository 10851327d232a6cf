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
// Chunked, kChunk (32) positions at a time, with b_t the cumulative log-decay *inside* the chunk
// (restarting at every chunk), B its total and D[t][s] = exp(b_t - b_s) for s <= t, 0 above:
//   out   = ((Q K^T) o D) V + diag(exp(b)) Q S_in
//   S_out = exp(B) S_in + (diag(exp(B - b)) K)^T V
// Every exponent is <= 0. The backward recomputes chunks in two sweeps with O(C M) state: forward
// (carrying S) for dq, reverse (carrying R = dL/dS_out) for dk, dv, d log_decay and dS0.
//
// Stored states: with a state spacing L (a multiple of kChunk), the forward also writes the state
// entering every span of L positions, S_{jL-1} (B, H, ceil(N / L), C, M; S0 or zeros for j = 0),
// and the backward runs both sweeps span by span from the last: the span's dq from its stored state,
// then its dk, dv, d log_decay in reverse, while the span's rows are still in the caches.
#pragma once

#include "common/cpu/path.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

namespace lintf::decayed {

using cpu::Dims;

// Raw pointers of one call, all tensors contiguous; per head: q, k (n, c), v, out, grad (n, m),
// log_decay, d_log_decay (n), states (c, m).
template <typename scalar_t, typename T>
struct Args {
  const scalar_t *q, *k, *v;
  const T* log_decay;
  const T* state0 = nullptr;      // initial state; null: zeros
  scalar_t* out = nullptr;        // forward
  T* state_out = nullptr;         // forward: final state; backward: the initial state's gradient
  const scalar_t* grad = nullptr; // backward: gradient of out
  const T* grad_state = nullptr;  // backward: gradient of the final state; null: zeros
  scalar_t *dq = nullptr, *dk = nullptr, *dv = nullptr;
  T* d_log_decay = nullptr;
  T* chunk_states = nullptr;      // forward: written; backward: read; null: none kept
  int64_t state_spacing = 0;      // positions between the chunk states, a multiple of kChunk
  bool stream_gradients = false;  // backward: dq, dk, dv written past the caches
};

// The per-head passes of one vector path and input dtype.
template <typename scalar_t, typename T>
struct Passes {
  void (*forward)(const Dims&, const Args<scalar_t, T>&, int64_t head);
  void (*backward)(const Dims&, const Args<scalar_t, T>&, int64_t head);
};

using Path = cpu::PathTable<Passes>;

// Null when not compiled into this build (the x86-64 paths elsewhere).
const Path* avx512_path();
const Path* avx2_path();
const Path* portable_path();

}  // namespace lintf::decayed
