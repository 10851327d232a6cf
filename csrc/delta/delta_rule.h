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
// The backward recomputes the chunks' entering states in a forward sweep and keeps each with the
// chunk's X, h and tinv (cpu/kept.h: N (C M / 32 + M + 64) values of the head a thread works on), then
// runs the chunks in reverse carrying dL/dS.
#pragma once

#include "common/cpu/state_args.h"

#include <cstddef>

namespace lintf::delta {

using cpu::Dims;

// Raw pointers of one call beyond the common ones (common/cpu/state_args.h); per head: beta, log_decay
// and their gradients (n).
template <typename scalar_t, typename T>
struct Args : cpu::StateArgs<scalar_t, T> {
  const T* beta = nullptr;
  const T* log_decay = nullptr;  // null: no decay
  T scale = 1;
  T *d_beta = nullptr, *d_log_decay = nullptr;
  int64_t streamed_kept_bytes = 0;  // backward: a head's kept copies from this size on are streamed (common/cpu/tuning.h)
};

using Path = cpu::HeadPath<Args>;

// Memory for what the backward's forward sweeps keep (cpu/kept.h), reused by the heads of one call so
// that fresh pages are faulted in once per thread, not once per head (cpu/kept_pool.cpp): take_kept
// returns a 64-byte aligned block of at least `bytes` (a returned one when one is large enough),
// give_kept returns it, release_kept frees every returned block (the backward calls it after its heads).
void* take_kept(std::size_t bytes);
void give_kept(void* block, std::size_t bytes);
void release_kept();

// Null when not compiled into this build (the x86-64 paths elsewhere).
const Path* avx512_path();
const Path* avx2_path();
const Path* portable_path();

}  // namespace lintf::delta
