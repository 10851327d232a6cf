// Shared declarations of the CPU delta rule (its schema in delta_rule.cpp, its kernels in
// cpu/delta_rule_cpu.cpp and one translation unit per vector path, cpu/delta_rule_{avx512,avx2,portable}.cpp,
// instantiating cpu/vector_path.h).
//
// Semantics, for q, k (B, H, N, C), v (B, H, N, M), beta (B, H, N), an optional log_decay (B, H, N) <= 0
// and an optional initial state S0 (B, H, C, M), with a_t = exp(log_decay_t) (1 without decay):
//   u_t   = beta_t (v_t - (a_t S_{t-1})^T k_t)
//   S_t   = a_t S_{t-1} + k_t u_t^T          (S_{-1} = S0, zeros when absent)
//   out_t = scale S_t^T q_t
// The op returns out (v's dtype) and S_{N-1} (the accumulation dtype: fp32, fp64 for fp64 inputs);
// beta, log_decay and S0 come in the accumulation dtype. The backward takes the gradients of out and
// of the final state (absent: zero) and returns dq, dk, dv (input dtype), d beta, d log_decay (empty
// without log_decay) and dS0 (accumulation dtype).
//
// Chunked, kChunk (32) positions at a time: with b_t the cumulative log-decay inside the chunk,
// G[t][s] = exp(b_t - b_s) (s <= t), A the strictly lower part of diag(beta) ((K K^T) o G) and
// T = (I + A)^{-1} (the UT form of the chunk's product of (I - beta k k^T) factors):
//   X = V - diag(exp(b)) K S_in,   U = T diag(beta) X
//   out   = scale (diag(exp(b)) Q S_in + ((Q K^T) o G) U)
//   S_out = exp(b_L) S_in + (diag(exp(b_L - b)) K)^T U
// The backward recomputes the chunks' entering states in a forward sweep (one (C, M) state per
// chunk and head held at a time per thread: O(N C M / 32) per thread), then runs the chunks in
// reverse carrying dL/dS.
#pragma once

#include "common/cpu/path.h"

#include <cstdint>

namespace lintf::delta {

using cpu::Dims;

// Raw pointers of one call, all tensors contiguous; per head: q, k, dq, dk (n, c), v, out, grad, dv
// (n, m), beta, log_decay and their gradients (n), states (c, m).
template <typename scalar_t, typename T>
struct Args {
  const scalar_t *q, *k, *v;
  const T* beta;
  const T* log_decay = nullptr;    // null: no decay
  T scale = 1;
  const T* state0 = nullptr;       // initial state; null: zeros
  scalar_t* out = nullptr;         // forward
  T* state_out = nullptr;          // forward: final state; backward: the initial state's gradient
  const scalar_t* grad = nullptr;  // backward: gradient of out
  const T* grad_state = nullptr;   // backward: gradient of the final state; null: zeros
  scalar_t *dq = nullptr, *dk = nullptr, *dv = nullptr;
  T *d_beta = nullptr, *d_log_decay = nullptr;
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

}  // namespace lintf::delta
