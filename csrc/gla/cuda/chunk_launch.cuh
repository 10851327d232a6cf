// Host side of the chunked CUDA gated linear attention: which shapes it takes (plan), and the launches of
// the forward (added states, scan, outputs) and of the backward (both sweeps' states, their scans, dq,
// then dk, dv and d log_gate).
#pragma once

#include "common/cuda/chunk_plan.cuh"
#include "common/inputs.h"
#include "gla/cuda/chunk_backward.cuh"

namespace lintf {
namespace gla_chunk {

using chunk::data;
using chunk::dispatch;
namespace runtime = chunk::runtime;

// The dimensions the GLA kernels run q (B, H, N, C), v (B, H, N, M) with, or nullopt (see plan_with).
inline std::optional<Dims> plan(const at::Tensor& q, const at::Tensor& v) {
  return chunk::plan_with<StateLayout, OutputLayout, DqLayout, DkvLayout>(q, v);
}

// log_gate (B, H, N, C) fp32; state0: contiguous fp32 (B, H, C, M) or undefined. Returns (out, final state).
inline chunk::DecayingOutputs forward(const Dims& d, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const at::Tensor& log_gate, double scale, const at::Tensor& state0) {
  const auto qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  const auto cumulative = FeatureGates::cumulative(d, log_gate);
  auto final_state = at::empty({q.size(0), q.size(1), d.c, d.m}, v.options().dtype(at::kFloat));
  auto out = at::empty(vc.sizes(), vc.options());
  dispatch(v.scalar_type(), "lintf::gated_linear_attention", [&](auto kind) {
    using T = typename decltype(kind)::Type;
    constexpr bool kSplit = decltype(kind)::kSplit;
    const at::Tensor states =
        chunk::entering_states<T, kSplit, FeatureGates>(d, kc, vc, cumulative, state0, final_state);
    const OutputArgs<T> args{data<T>(qc), data<T>(kc), data<T>(vc), cumulative.data_ptr<float>(),
                             states.data_ptr<float>(), static_cast<float>(scale),
                             reinterpret_cast<T*>(out.data_ptr())};
    runtime::launch(gla_output_kernel<T, kSplit>, d.heads * d.chunks * d.value_tiles, tile::kThreads,
                    OutputLayout<T>(d.cp, d.mt).bytes, args, d);
  });
  return {out, final_state};
}

// state0, grad_state: contiguous fp32 (B, H, C, M) or undefined. Returns (dq, dk, dv, d log_gate, dS0).
inline chunk::DecayingGradients backward(const Dims& d, const at::Tensor& grad_out, const at::Tensor& q,
                                         const at::Tensor& k, const at::Tensor& v, const at::Tensor& log_gate,
                                         double scale, const at::Tensor& state0, const at::Tensor& grad_state) {
  const auto qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  const auto g = grad_out.to(v.scalar_type()).contiguous();
  const auto cumulative = FeatureGates::cumulative(d, log_gate);
  const auto f32 = v.options().dtype(at::kFloat);
  auto d_state0 = at::empty({q.size(0), q.size(1), d.c, d.m}, f32);
  auto dq = at::empty(qc.sizes(), qc.options()), dk = at::empty(kc.sizes(), kc.options());
  auto dv = at::empty(vc.sizes(), vc.options());
  auto d_log_gate = at::empty(qc.sizes(), f32);
  dispatch(v.scalar_type(), "lintf::gated_linear_attention", [&](auto kind) {
    using T = typename decltype(kind)::Type;
    constexpr bool kSplit = decltype(kind)::kSplit;
    const chunk::Sweeps sweeps = chunk::backward_sweeps<T, kSplit, FeatureGates>(
        d, qc, kc, vc, g, cumulative, static_cast<float>(scale), state0, grad_state, d_state0);
    const BackwardArgs<T> args{data<T>(qc), data<T>(kc), data<T>(vc), data<T>(g), cumulative.data_ptr<float>(),
                               sweeps.states.data_ptr<float>(), sweeps.grad_states.data_ptr<float>(),
                               sweeps.x.data_ptr<float>(),
                               static_cast<float>(scale), reinterpret_cast<T*>(dq.data_ptr()),
                               reinterpret_cast<T*>(dk.data_ptr()), reinterpret_cast<T*>(dv.data_ptr()),
                               d_log_gate.data_ptr<float>()};
    runtime::launch(gla_dq_kernel<T, kSplit>, d.heads * d.chunks, tile::kThreads, DqLayout<T>(d.cp, d.mt).bytes, args,
                    d);
    runtime::launch(gla_dkv_kernel<T, kSplit>, d.heads * d.chunks, tile::kThreads, DkvLayout<T>(d.cp, d.mt).bytes,
                    args, d);
  });
  return {dq, dk, dv, d_log_gate, d_state0};
}

}  // namespace gla_chunk
}  // namespace lintf
