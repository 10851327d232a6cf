// Host side of the CUDA delta rule: which shapes its sweeps take (plan), and the forward and backward as the
// ATen part (aten.h) and the sequential sweeps (sweeps.cuh) in turn.
#pragma once

#include "common/cuda/chunk_plan.cuh"
#include "common/inputs.h"
#include "delta/cuda/aten.h"
#include "delta/cuda/sweeps.cuh"

#include <tuple>
#include <type_traits>

namespace lintf {
namespace delta_cuda {

using delta_sweep::SweepArgs;
using delta_sweep::SweepLayout;
using ForwardResult = std::tuple<at::Tensor, at::Tensor>;  // out, S_N
// dq, dk, dv, d beta, d log_decay, dS0
using BackwardResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

static_assert(kChunk == tile::kChunk, "the ATen part and the sweeps cut the sequence alike");

// The sweeps' shared memory as a layout template for chunk::plan_shape (fp32 tiles whatever T, the inputs'
// operand type; plan_shape is told so).
template <typename T>
struct Layout : SweepLayout {
  __host__ __device__ Layout(int cp, int mt) : SweepLayout(cp, mt) {}
};

// The dimensions the sweeps run q (B, H, N, C), v (B, H, N, M) with, or nullopt: the chunked kernels' rules
// (chunk::plan_with) for fp32 tiles.
inline std::optional<chunk::Dims> plan(const at::Tensor& q, const at::Tensor& v) {
  return chunk::plan_with<Layout>(q, v, at::kFloat);
}

// Calls fn(std::bool_constant<Split>{}): fp32 products as 3xTF32 unless torch allows TF32 matmuls.
template <typename Fn>
void with_split(Fn&& fn) {
  chunk::dispatch(at::kFloat, "lintf::delta_rule", [&](auto kind) {
    fn(std::bool_constant<decltype(kind)::kSplit>{});
  });
}

inline SweepArgs sweep_args(const chunk::Dims& d, const Chunks& x, const at::Tensor& start) {
  SweepArgs a{};
  a.whole = x.whole.data_ptr<float>();
  a.start = start.defined() ? start.data_ptr<float>() : nullptr;
  a.heads = d.heads, a.c = d.c, a.m = d.m, a.cp = d.cp, a.mt = d.mt, a.chunks = d.chunks, a.value_tiles = d.value_tiles;
  return a;
}

// The forward sweep's results: S_c entering each chunk (heads, chunks, c, m), U_c (heads, chunks, kChunk, m),
// S_N (B, H, c, m), and the operand F = diag(f) K it read (the backward reads it again).
struct Swept {
  at::Tensor states, u, last, fk;
};

inline Swept forward_sweep(const chunk::Dims& d, const Chunks& x, const at::Tensor& state0, const at::Tensor& q) {
  const auto [u0, w, fk] = x.forward_operands();
  auto states = at::empty({d.heads, d.chunks, d.c, d.m}, u0.options()), u = at::empty_like(u0);
  auto last = at::empty({q.size(0), q.size(1), d.c, d.m}, u0.options());
  SweepArgs a = sweep_args(d, x, state0);
  a.prepared = u0.data_ptr<float>(), a.left = w.data_ptr<float>(), a.right = fk.data_ptr<float>();
  a.states = states.data_ptr<float>(), a.rows = u.data_ptr<float>(), a.last = last.data_ptr<float>();
  with_split([&](auto split) {
    chunk::runtime::launch(delta_sweep::delta_forward_sweep_kernel<decltype(split)::value>, d.heads * d.value_tiles,
                           tile::kThreads, SweepLayout(d.cp, d.mt).bytes, a);
  });
  return {states, u, last, fk};
}

// log_decay, beta: fp32 (B, H, N); state0: contiguous fp32 (B, H, C, M) or undefined. Returns (out, S_N).
inline ForwardResult forward(const chunk::Dims& d, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const at::Tensor& beta, const std::optional<at::Tensor>& log_decay, double scale,
                             const at::Tensor& state0) {
  const Chunks x(q, k, v, beta, log_decay);
  const auto swept = forward_sweep(d, x, state0, q);
  return {outputs(x, x.scores(), swept.states, swept.u, scale, v), swept.last};
}

inline BackwardResult backward(const chunk::Dims& d, const at::Tensor& grad_out, const at::Tensor& q,
                               const at::Tensor& k, const at::Tensor& v, const at::Tensor& beta,
                               const std::optional<at::Tensor>& log_decay, double scale, const at::Tensor& state0,
                               const at::Tensor& grad_state) {
  const Chunks x(q, k, v, beta, log_decay);
  const auto swept = forward_sweep(d, x, state0, q);
  const auto dos = chunked(grad_out, x.count, scale), p = x.scores();
  const auto [r0, rt, qe] = backward_operands(x, p, swept.fk, dos);
  auto grads = at::empty_like(swept.states), dr = at::empty_like(swept.u), d_state0 = at::empty_like(swept.last);
  SweepArgs a = sweep_args(d, x, grad_state);
  a.prepared = r0.data_ptr<float>(), a.left = rt.data_ptr<float>(), a.right = qe.data_ptr<float>();
  a.third = x.kb.data_ptr<float>(), a.dos = dos.data_ptr<float>();
  a.states = grads.data_ptr<float>(), a.rows = dr.data_ptr<float>(), a.last = d_state0.data_ptr<float>();
  with_split([&](auto split) {
    chunk::runtime::launch(delta_sweep::delta_backward_sweep_kernel<decltype(split)::value>, d.heads * d.value_tiles,
                           tile::kThreads, SweepLayout(d.cp, d.mt).bytes, a);
  });
  const auto [dq, dk, dv, d_beta, d_log_decay] =
      gradients(x, p, swept.fk, qe, dos, swept.states, swept.u, grads, dr, q);
  return {dq, dk, dv, d_beta, d_log_decay, d_state0};
}

}  // namespace delta_cuda
}  // namespace lintf
