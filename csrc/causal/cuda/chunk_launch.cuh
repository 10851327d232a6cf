// Host side of the chunked CUDA causal product: which shapes it takes (plan), and the launches of the
// forward (state, scan, output) and of the backward (both sweeps' states, their scans, dq, dk and dv).
#pragma once

#include "causal/causal_product.h"
#include "causal/cuda/chunk_backward.cuh"
#include "common/cuda/chunk_plan.cuh"

#include <algorithm>

namespace lintf {
namespace chunk {

// The dimensions the causal kernels run q (B, H, N, C), v (B, H, N, M) with, or nullopt (see plan_with).
inline std::optional<Dims> plan(const at::Tensor& q, const at::Tensor& v) {
  return plan_with<StateLayout, OutputLayout, DqLayout, DkvLayout>(q, v);
}

// Exclusive scan of states (heads, chunks, ...) in place from start (heads, ...) or zeros; total gets start + all.
inline void scan(at::Tensor& states, const at::Tensor& start, at::Tensor* total, bool reverse) {
  const int64_t heads = states.size(0), chunks = states.size(1), width = states.numel() / std::max<int64_t>(1, heads * chunks);
  const int threads = 256;
  const int64_t blocks = (heads * width + threads - 1) / threads;
  if (blocks == 0) return;
  runtime::launch(state_scan_kernel, blocks, threads, 0, states.data_ptr<float>(),
                  start.defined() ? start.data_ptr<float>() : nullptr,
                  total != nullptr ? total->data_ptr<float>() : nullptr, heads, chunks, width, reverse);
}

// states[0] = (heads, chunks, c, m) and states[1] = (heads, chunks, c) of x, y (see StateArgs).
template <typename T, bool Split>
void chunk_states(const Dims& d, const at::Tensor& x, const at::Tensor& y, const at::Tensor& row_scale,
                  const at::Tensor& weights, bool unit_weights, at::Tensor& kv, at::Tensor& z) {
  const StateArgs<T> args{data<T>(x), data<T>(y), data<float>(row_scale), data<float>(weights), unit_weights,
                          kv.data_ptr<float>(), z.defined() ? z.data_ptr<float>() : nullptr};
  runtime::launch(chunk_state_kernel<T, Split>, d.heads * d.chunks * d.value_tiles, tile::kThreads,
                  StateLayout<T>(d.cp, d.mt).bytes, args, d);
}

// kv0, z0: contiguous fp32 initial state or undefined. Returns (out, denominator, final kv, final normaliser).
inline ForwardResult forward(const Dims& d, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double eps,
                             bool normalize, const at::Tensor& kv0, const at::Tensor& z0) {
  const auto qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  const auto f32 = v.options().dtype(at::kFloat);
  auto kv = at::empty({d.heads, d.chunks, d.c, d.m}, f32), z = at::empty({d.heads, d.chunks, d.c}, f32);
  auto kv_final = at::empty({q.size(0), q.size(1), d.c, d.m}, f32), z_final = at::empty({q.size(0), q.size(1), d.c}, f32);
  auto out = at::empty(vc.sizes(), vc.options());
  auto den = normalize ? at::empty({q.size(0), q.size(1), d.n}, f32) : at::empty({0}, f32);
  dispatch(v.scalar_type(), "lintf::causal_product", [&](auto kind) {
    using T = typename decltype(kind)::Type;
    constexpr bool kSplit = decltype(kind)::kSplit;
    chunk_states<T, kSplit>(d, kc, vc, at::Tensor(), at::Tensor(), true, kv, z);
    scan(kv, kv0, &kv_final, false);
    scan(z, z0, &z_final, false);
    const OutputArgs<T> args{data<T>(qc), data<T>(kc), data<T>(vc), kv.data_ptr<float>(), z.data_ptr<float>(),
                             reinterpret_cast<T*>(out.data_ptr()), normalize ? den.data_ptr<float>() : nullptr,
                             static_cast<float>(eps), normalize};
    runtime::launch(chunk_output_kernel<T, kSplit>, d.heads * d.chunks * d.value_tiles, tile::kThreads,
                    OutputLayout<T>(d.cp, d.mt).bytes, args, d);
  });
  return {out, den, kv_final, z_final};
}

// States and state gradients: contiguous fp32 or undefined. Returns (dq, dk, dv, d_kv0, d_z0).
inline BackwardResult backward(const Dims& d, const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
                               const at::Tensor& v, const at::Tensor& out, const at::Tensor& denominator, bool normalize,
                               const at::Tensor& kv0, const at::Tensor& z0, const at::Tensor& grad_kv,
                               const at::Tensor& grad_z) {
  const auto qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  const auto g = grad_out.to(v.scalar_type()).contiguous();
  const auto f32 = v.options().dtype(at::kFloat);
  at::Tensor inv_den, neg_grad_dot_out;
  if (normalize) {
    inv_den = denominator.to(at::kFloat).reciprocal().contiguous();                           // (B, H, N)
    neg_grad_dot_out = (g.to(at::kFloat) * out.to(at::kFloat)).sum(3).neg_().contiguous();  // (B, H, N)
  }
  auto kv = at::empty({d.heads, d.chunks, d.c, d.m}, f32);
  auto z = normalize ? at::empty({d.heads, d.chunks, d.c}, f32) : at::Tensor();
  auto dkv = at::empty({d.heads, d.chunks, d.c, d.m}, f32);
  auto dz = normalize ? at::empty({d.heads, d.chunks, d.c}, f32) : at::zeros({d.heads, d.chunks, d.c}, f32);
  auto d_kv0 = at::empty({q.size(0), q.size(1), d.c, d.m}, f32), d_z0 = at::empty({q.size(0), q.size(1), d.c}, f32);
  auto dq = at::empty(qc.sizes(), qc.options()), dk = at::empty(kc.sizes(), kc.options());
  auto dv = at::empty(vc.sizes(), vc.options());
  dispatch(v.scalar_type(), "lintf::causal_product", [&](auto kind) {
    using T = typename decltype(kind)::Type;
    constexpr bool kSplit = decltype(kind)::kSplit;
    chunk_states<T, kSplit>(d, kc, vc, at::Tensor(), at::Tensor(), normalize, kv, z);
    chunk_states<T, kSplit>(d, qc, g, inv_den, neg_grad_dot_out, false, dkv, dz);
    scan(kv, kv0, nullptr, false);
    if (normalize) scan(z, z0, nullptr, false);
    scan(dkv, grad_kv, &d_kv0, true);
    scan(dz, grad_z, &d_z0, true);
    const BackwardArgs<T> args{data<T>(qc), data<T>(kc), data<T>(vc), data<T>(g), data<float>(inv_den),
                               data<float>(neg_grad_dot_out), kv.data_ptr<float>(), z.defined() ? z.data_ptr<float>() : nullptr,
                               dkv.data_ptr<float>(), dz.data_ptr<float>(), reinterpret_cast<T*>(dq.data_ptr()),
                               reinterpret_cast<T*>(dk.data_ptr()), reinterpret_cast<T*>(dv.data_ptr())};
    runtime::launch(chunk_dq_kernel<T, kSplit>, d.heads * d.chunks, tile::kThreads, DqLayout<T>(d.cp, d.mt).bytes,
                    args, d);
    runtime::launch(chunk_dkv_kernel<T, kSplit>, d.heads * d.chunks, tile::kThreads, DkvLayout<T>(d.cp, d.mt).bytes,
                    args, d);
  });
  return {dq, dk, dv, d_kv0, d_z0};
}

}  // namespace chunk
}  // namespace lintf
