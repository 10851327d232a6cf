// Shared declarations of the lintf causal-product op: its schema in causal_product.cpp, its kernels in
// cpu/causal_product_cpu.cpp and cuda/causal_product_cuda.cu.
//
// Semantics, for q, k (B, H, N, C) and v (B, H, N, M):
//   numerator_i   = sum_{j<=i} (q_i . k_j) v_j
//   denominator_i = sum_{j<=i}  q_i . k_j + eps                      (normalize only)
//   out_i         = numerator_i / denominator_i  if normalize, else numerator_i
// An optional initial state (kv = S0 (B, H, C, M), normaliser = z0 (B, H, C)) summarises earlier
// positions: numerator_i gains q_i S0 and denominator_i gains q_i . z0. The op also returns the
// final state (S0 + sum_j k_j v_j^T, z0 + sum_j k_j), whatever normalize is.
// Inputs are fp16, bf16, fp32 or fp64 (all three alike); accumulation is fp32 (fp64 for
// fp64); `out` has the input dtype; `denominator` and the states the accumulation dtype
// (denominator: (B, H, N) when normalize, else an empty (0,) tensor). The backward takes the
// gradients of the final state (optional: absent means zero) and returns (dq, dk, dv) in the
// input dtype and the gradients of the initial state (zeros-based even when it was absent).
// Kept states: with states_every > 0 (a multiple of 32 on the CPU; 0 elsewhere) the forward also
// returns the state entering every span of states_every positions, (B, H, ceil(N / states_every),
// C * M + C) in the accumulation dtype, each kv (C x M, row-major) then z (C); else (B, H, 0, C * M + C).
// Given back to the backward with the same states_every, they replace the backward's recomputation
// of prefix states (CPU: csrc/causal/cpu/sweeps.h, `spans`).
#pragma once

#include "common/inputs.h"

#include <torch/library.h>

#include <ATen/ATen.h>

#include <optional>
#include <tuple>

namespace lintf {

// TORCH_CHECKs an optional state pair (kv (B, H, C, M), normaliser (B, H, C)) against q and v;
// `what` names it in the message ("initial state", "final-state gradient").
inline void check_state(const std::optional<at::Tensor>& kv, const std::optional<at::Tensor>& normaliser,
                        const at::Tensor& q, const at::Tensor& v, const char* what) {
  const auto acc = accumulation_type(v.scalar_type());
  const auto check = [&](const std::optional<at::Tensor>& tensor, at::IntArrayRef shape, const char* name) {
    if (!tensor.has_value()) return;
    const at::Tensor& t = *tensor;
    TORCH_CHECK(t.sizes() == shape, "lintf::causal_product: ", what, " ", name, " must have shape ", shape,
                ", got ", t.sizes());
    TORCH_CHECK(t.scalar_type() == acc, "lintf::causal_product: ", what, " ", name, " must have dtype ", acc,
                " (the accumulation dtype of ", v.scalar_type(), " inputs), got ", t.scalar_type());
    TORCH_CHECK(t.device() == q.device(), "lintf::causal_product: ", what, " ", name, " must be on ", q.device(),
                ", got ", t.device());
  };
  check(kv, {q.size(0), q.size(1), q.size(3), v.size(3)}, "kv");
  check(normaliser, {q.size(0), q.size(1), q.size(3)}, "normaliser");
}

using ForwardResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;  // out, den, kv, normaliser
using KeptForwardResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;  // and kept states
// The kept-states tensor (B, H, spans, C * M + C) for q (B, H, N, C) and v (B, H, N, M), uninitialised.
inline at::Tensor kept_states_like(const at::Tensor& q, const at::Tensor& v, int64_t spans) {
  return at::empty({q.size(0), q.size(1), spans, q.size(3) * v.size(3) + q.size(3)},
                   v.options().dtype(accumulation_type(v.scalar_type())));
}

// A forward's result with no kept states (kernels that keep none: states_every == 0).
inline KeptForwardResult without_kept_states(const ForwardResult& result, const at::Tensor& q, const at::Tensor& v) {
  const auto& [out, den, kv, z] = result;
  return {out, den, kv, z, kept_states_like(q, v, 0)};
}

using BackwardResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;  // dq dk dv dkv dz

KeptForwardResult causal_product_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double eps,
                                     bool normalize, const std::optional<at::Tensor>& kv,
                                     const std::optional<at::Tensor>& normaliser, int64_t states_every);

BackwardResult causal_product_backward_cpu(const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
                                           const at::Tensor& v, const at::Tensor& out, const at::Tensor& denominator,
                                           bool normalize, const std::optional<at::Tensor>& kv,
                                           const std::optional<at::Tensor>& normaliser,
                                           const std::optional<at::Tensor>& grad_kv,
                                           const std::optional<at::Tensor>& grad_normaliser,
                                           const std::optional<at::Tensor>& kept_states, int64_t states_every);

}  // namespace lintf
