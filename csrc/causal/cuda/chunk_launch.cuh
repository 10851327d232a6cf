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

// A tensor of states (heads, chunks, ...) to scan in place from start (heads, ...) or zeros, total getting
// start + all; undefined states: nothing.
inline ScanPart scan_part(at::Tensor& states, const at::Tensor& start, at::Tensor* total) {
  if (!states.defined()) return {nullptr, nullptr, nullptr, 0};
  const int64_t heads_chunks = std::max<int64_t>(1, states.size(0) * states.size(1));
  return {states.data_ptr<float>(), start.defined() ? start.data_ptr<float>() : nullptr,
          total != nullptr ? total->data_ptr<float>() : nullptr, states.numel() / heads_chunks};
}

// Exclusive scans over chunks of the states kv (heads, chunks, c, m) and z (heads, chunks, c), in one launch.
inline void scan(const ScanPart& kv, const ScanPart& z, int64_t heads, int64_t chunks, bool reverse) {
  const int threads = 256;
  const int64_t blocks = (heads * (kv.width + z.width) + threads - 1) / threads;
  if (blocks == 0) return;
  runtime::launch(state_scan_kernel, blocks, threads, 0, kv, z, heads, chunks, reverse);
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

// r = 1 / den and -(grad . out) per row of contiguous den (B, H, N) fp32, grad and out (B, H, N, M) (row_terms_kernel).
template <typename T>
void row_terms(const at::Tensor& den, const at::Tensor& grad, const at::Tensor& out, at::Tensor& inv_den,
               at::Tensor& neg_grad_dot_out) {
  const int64_t rows = den.numel(), per_block = kRowTermsThreads / 32;
  if (rows == 0) return;
  runtime::launch(row_terms_kernel<T>, (rows + per_block - 1) / per_block, kRowTermsThreads, 0, den.data_ptr<float>(),
                  data<T>(grad), data<T>(out), inv_den.data_ptr<float>(), neg_grad_dot_out.data_ptr<float>(), rows,
                  static_cast<int>(grad.size(-1)));
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
    scan(scan_part(kv, kv0, &kv_final), scan_part(z, z0, &z_final), d.heads, d.chunks, false);
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
  at::Tensor den, outc, inv_den, neg_grad_dot_out;
  if (normalize) {
    den = denominator.to(at::kFloat).contiguous(), outc = out.to(v.scalar_type()).contiguous();  // (B, H, N), like v
    inv_den = at::empty(den.sizes(), den.options()), neg_grad_dot_out = at::empty(den.sizes(), den.options());
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
    if (normalize) row_terms<T>(den, g, outc, inv_den, neg_grad_dot_out);
    chunk_states<T, kSplit>(d, kc, vc, at::Tensor(), at::Tensor(), normalize, kv, z);
    chunk_states<T, kSplit>(d, qc, g, inv_den, neg_grad_dot_out, false, dkv, dz);
    scan(scan_part(kv, kv0, nullptr), scan_part(z, z0, nullptr), d.heads, d.chunks, false);
    scan(scan_part(dkv, grad_kv, &d_kv0), scan_part(dz, grad_z, &d_z0), d.heads, d.chunks, true);
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
