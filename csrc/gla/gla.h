// Shared declarations of the CPU gated linear attention (GLA; its schema in gla.cpp, its kernels in
// cpu/gla_cpu.cpp and one translation unit per vector path, cpu/gla_{avx512,avx2,portable}.cpp,
// instantiating cpu/vector_path.h).
//
// Semantics, for q, k (B, H, N, C), v (B, H, N, M), log_gate (B, H, N, C) <= 0 and an optional
// initial state S0 (B, H, C, M):
//   S_t   = diag(exp(log_gate_t)) S_{t-1} + k_t v_t^T     (S_{-1} = S0, zeros when absent)
//   out_t = scale S_t^T q_t
// The op returns out (v's dtype) and S_{N-1} (the accumulation dtype: fp32, fp64 for fp64 inputs);
// log_gate and S0 come in the accumulation dtype. The backward takes the gradients of out and of the
// final state (absent: zero) and returns dq, dk, dv (input dtype), d log_gate and dS0 (accumulation dtype).
//
// Chunked, kChunk (32) positions at a time. The kernels get the gates g = exp(log_gate) and never
// exponentiate a difference: key s reaches query t >= s of a chunk through D_ts = prod_{s<u<=t} g_u
// per channel, built by running products (every factor <= 1, so nothing overflows whatever the
// gates); the state entering a chunk reaches row t through P_t = prod_{u<=t} g_u and row t reaches
// the state leaving it through prod_{u>t} g_u. The backward runs a forward sweep (carrying S, for
// dq) and a reverse one (carrying dL/dS, for dk, dv, dS0) with O(C M) state per head, and
// d log_gate is the reverse cumulative sum of q o dq - k o dk plus the final state's term
// rowsum(S_N o dL/dS_N) (every gate scales what it multiplies; treating the cumulative log-gates as
// free variables gives this).
#pragma once

#include "common/cpu/state_args.h"

namespace lintf::gla {

using cpu::Dims;

// Raw pointers of one call beyond the common ones (common/cpu/state_args.h); per head: gates and
// d_log_gate (n, c).
template <typename scalar_t, typename T>
struct Args : cpu::StateArgs<scalar_t, T> {
  const T* gates = nullptr;  // exp(log_gate)
  T scale = 1;
  T* d_log_gate = nullptr;
};

using Path = cpu::HeadPath<Args>;

// Null when not compiled into this build (the x86-64 paths elsewhere).
const Path* avx512_path();
const Path* avx2_path();
const Path* portable_path();

}  // namespace lintf::gla
