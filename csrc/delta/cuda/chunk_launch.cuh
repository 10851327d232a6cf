// Host side of the CUDA delta rule: which shapes its kernels take (plan), the forward as three launches (each
// chunk's operands, the sweep, the outputs: chunk.cuh, sweeps.cuh) and the backward as the same chunk kernel,
// the ATen part (aten.h) around both sequential sweeps, and the per-row terms (row_terms.cuh).
#pragma once

#include "common/cuda/chunk_plan.cuh"
#include "common/inputs.h"
#include "delta/cuda/aten.h"
#include "delta/cuda/backward_operands.cuh"
#include "delta/cuda/chunk.cuh"
#include "delta/cuda/row_terms.cuh"
#include "delta/cuda/sweeps.cuh"

#include <tuple>
#include <vector>
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

// The dimensions the kernels run heads x n positions of c features and m value columns of dtype with on CUDA
// device `device`, or nullopt: the chunked kernels' rules (chunk::plan_shape) for fp32 tiles.
inline std::optional<chunk::Dims> plan_shape(at::ScalarType dtype, int64_t heads, int64_t n, int64_t c, int64_t m,
                                             int device) {
  return chunk::plan_shape<Layout, delta_chunk::PrepareLayout, delta_chunk::OutputLayout,
                           delta_backward::OperandLayout>(dtype, heads, n, c, m, device, at::kFloat);
}

// plan_shape for q (B, H, N, C) and v (B, H, N, M) on q's device.
inline std::optional<chunk::Dims> plan(const at::Tensor& q, const at::Tensor& v) {
  return plan_shape(q.scalar_type(), q.size(0) * q.size(1), q.size(2), q.size(3), v.size(3), q.get_device());
}

// Calls fn(std::bool_constant<Split>{}): fp32 products as 3xTF32 unless torch allows TF32 matmuls.
template <typename Fn>
void with_split(Fn&& fn) {
  chunk::dispatch(at::kFloat, "lintf::delta_rule", [&](auto kind) {
    fn(std::bool_constant<decltype(kind)::kSplit>{});
  });
}

inline SweepArgs sweep_args(const chunk::Dims& d, const at::Tensor& whole, const at::Tensor& start) {
  SweepArgs a{};
  a.whole = whole.data_ptr<float>();
  a.start = start.defined() ? start.data_ptr<float>() : nullptr;
  a.heads = d.heads, a.c = d.c, a.m = d.m, a.cp = d.cp, a.mt = d.mt, a.chunks = d.chunks, a.value_tiles = d.value_tiles;
  return a;
}

// The forward sweep's results: S_c entering each chunk (heads, chunks, c, m), U_c (heads, chunks, kChunk, m),
// S_N (B, H, c, m), and the operand F = diag(f) K it read (the backward reads it again).
struct Swept {
  at::Tensor states, u, last, fk;
};

// The forward sweep over the operands U0, W, F and exp(B) of every chunk.
inline Swept forward_sweep(const chunk::Dims& d, const at::Tensor& u0, const at::Tensor& w, const at::Tensor& fk,
                           const at::Tensor& whole, const at::Tensor& state0, const at::Tensor& q) {
  auto states = at::empty({d.heads, d.chunks, d.c, d.m}, u0.options()), u = at::empty_like(u0);
  auto last = at::empty({q.size(0), q.size(1), d.c, d.m}, u0.options());
  SweepArgs a = sweep_args(d, whole, state0);
  a.prepared = u0.data_ptr<float>(), a.left = w.data_ptr<float>(), a.right = fk.data_ptr<float>();
  a.states = states.data_ptr<float>(), a.rows = u.data_ptr<float>(), a.last = last.data_ptr<float>();
  with_split([&](auto split) {
    chunk::runtime::launch(delta_sweep::delta_forward_sweep_kernel<decltype(split)::value>, d.heads * d.value_tiles,
                           tile::kThreads, SweepLayout(d.cp, d.mt).bytes, a);
  });
  return {states, u, last, fk};
}

// Calls fn(T{}, std::bool_constant<Split>{}): T the inputs' element type, Split as with_split.
template <typename Fn>
void with_types(at::ScalarType dtype, Fn&& fn) {
  chunk::dispatch(dtype, "lintf::delta_rule", [&](auto kind) {
    using T = typename decltype(kind)::Type;
    with_split([&](auto split) { fn(T{}, split); });
  });
}

// delta_prepare_kernel over every chunk: the sweep's operands, and with `for_backward` the chunks' terms the
// backward reads (Prepared). k, v contiguous (B, H, N, .); beta, log_decay contiguous fp32 (B, H, N) or undefined.
inline Prepared prepare(const chunk::Dims& d, const at::Tensor& k, const at::Tensor& v, const at::Tensor& beta,
                        const at::Tensor& log_decay, bool for_backward) {
  const auto f32 = v.options().dtype(at::kFloat);
  const bool decay = log_decay.defined();
  const auto per_chunk = [&](bool wanted, at::IntArrayRef each) {  // (heads, chunks, each...) or undefined
    std::vector<int64_t> sizes = {d.heads, d.chunks};
    sizes.insert(sizes.end(), each.begin(), each.end());
    return wanted ? at::empty(sizes, f32) : at::Tensor();
  };
  const auto keys = [&](bool wanted) { return per_chunk(wanted, {kChunk, d.c}); };
  const auto mats = [&](bool wanted) { return per_chunk(wanted, {kChunk, kChunk}); };
  const auto rows = [&](bool wanted) { return per_chunk(wanted, {kChunk}); };
  Prepared p{at::empty({d.heads, d.chunks, kChunk, d.m}, f32), keys(true), keys(true), rows(true),
             at::empty({d.heads, d.chunks}, f32), rows(for_backward && decay), rows(for_backward && decay),
             mats(for_backward && decay), mats(for_backward), mats(for_backward), mats(for_backward),
             keys(for_backward && decay), keys(for_backward)};
  const auto ptr = [](const at::Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; };
  with_types(k.scalar_type(), [&](auto type, auto split) {
    using T = decltype(type);
    const delta_chunk::PrepareArgs<T> args{chunk::data<T>(k), chunk::data<T>(v), beta.data_ptr<float>(),
                                           chunk::data<float>(log_decay), ptr(p.u0), ptr(p.w), ptr(p.fk),
                                           ptr(p.cumulative), ptr(p.whole), ptr(p.e), ptr(p.f), ptr(p.decay),
                                           ptr(p.h), ptr(p.a), ptr(p.tinv), ptr(p.ek), ptr(p.kb)};
    chunk::runtime::launch(delta_chunk::delta_prepare_kernel<T, decltype(split)::value>, d.heads * d.chunks,
                           tile::kThreads, delta_chunk::PrepareLayout<T>(d.cp, d.mt).bytes, args, d);
  });
  return p;
}

// log_decay, beta: fp32 (B, H, N); state0: contiguous fp32 (B, H, C, M) or undefined. Returns (out, S_N).
inline ForwardResult forward(const chunk::Dims& d, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const at::Tensor& beta, const std::optional<at::Tensor>& log_decay, double scale,
                             const at::Tensor& state0) {
  const auto qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  const auto decay = log_decay.has_value() ? log_decay->contiguous() : at::Tensor();
  const auto p = prepare(d, kc, vc, beta.contiguous(), decay, false);
  const auto swept = forward_sweep(d, p.u0, p.w, p.fk, p.whole, state0, q);
  auto out = at::empty(vc.sizes(), vc.options());
  with_types(q.scalar_type(), [&](auto type, auto split) {
    using T = decltype(type);
    const delta_chunk::OutputArgs<T> args{chunk::data<T>(qc), chunk::data<T>(kc), p.cumulative.data_ptr<float>(),
                                          swept.states.data_ptr<float>(), swept.u.data_ptr<float>(),
                                          reinterpret_cast<T*>(out.data_ptr()), static_cast<float>(scale)};
    chunk::runtime::launch(delta_chunk::delta_output_kernel<T, decltype(split)::value>,
                           d.heads * d.chunks * d.value_tiles, tile::kThreads,
                           delta_chunk::OutputLayout<T>(d.cp, d.mt).bytes, args, d);
  });
  return {out, swept.last};
}

// P, Qe, dO = scale grad_out in chunks, R0 and Rt (backward_operands.cuh) from q, k, grad_out (contiguous,
// (B, H, N, .)) and the chunk kernel's b, T and F.
inline std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> backward_operands(
    const chunk::Dims& d, const at::Tensor& q, const at::Tensor& k, const at::Tensor& grad_out, const Prepared& pr,
    double scale) {
  const auto f32 = pr.w.options();
  auto p = at::empty({d.heads, d.chunks, kChunk, kChunk}, f32), qe = at::empty_like(pr.w);
  auto dos = at::empty_like(pr.u0), r0 = at::empty_like(pr.u0), rt = at::empty_like(pr.w);
  with_types(q.scalar_type(), [&](auto type, auto split) {
    using T = decltype(type);
    const delta_backward::OperandArgs<T> args{chunk::data<T>(q), chunk::data<T>(k), chunk::data<T>(grad_out),
                                              pr.cumulative.data_ptr<float>(), pr.tinv.data_ptr<float>(),
                                              pr.fk.data_ptr<float>(), p.data_ptr<float>(), qe.data_ptr<float>(),
                                              dos.data_ptr<float>(), r0.data_ptr<float>(), rt.data_ptr<float>(),
                                              static_cast<float>(scale)};
    chunk::runtime::launch(delta_backward::delta_backward_operands_kernel<T, decltype(split)::value>,
                           d.heads * d.chunks, tile::kThreads, delta_backward::OperandLayout<T>(d.cp, d.mt).bytes,
                           args, d);
  });
  return {p, qe, dos, r0, rt};
}

// d beta and d log_decay (fp32 (B, H, N); d log_decay empty without decay) by delta_row_terms_kernel.
inline std::tuple<at::Tensor, at::Tensor> row_terms(const chunk::Dims& d, const RowTermOperands& o,
                                                    const at::Tensor& states, const at::Tensor& grads,
                                                    const at::Tensor& whole, const at::Tensor& q, bool decay) {
  const auto f32 = whole.options();
  auto d_beta = at::empty({d.heads, d.chunks, kChunk, 1}, f32);
  auto d_log_decay = decay ? at::empty_like(d_beta) : at::Tensor();
  const auto ptr = [](const at::Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; };
  const delta_rows::RowTermArgs a{ptr(o.dp), ptr(o.p), ptr(o.na), ptr(o.a), ptr(o.h), ptr(o.qe), ptr(o.dos_st),
                                  ptr(o.ek), ptr(o.rows), ptr(o.fk), ptr(o.u_dst), ptr(o.dr), ptr(o.xs),
                                  states.data_ptr<float>(), grads.data_ptr<float>(), whole.data_ptr<float>(),
                                  d_beta.data_ptr<float>(), ptr(d_log_decay), d.c, d.m};
  chunk::runtime::launch(delta_rows::delta_row_terms_kernel, d.heads * d.chunks, tile::kThreads,
                         delta_rows::RowTermLayout().bytes, a);
  return {unchunked(d_beta, q, at::kFloat).squeeze(3),
          decay ? unchunked(d_log_decay, q, at::kFloat).squeeze(3) : at::empty({0}, f32)};
}

inline BackwardResult backward(const chunk::Dims& d, const at::Tensor& grad_out, const at::Tensor& q,
                               const at::Tensor& k, const at::Tensor& v, const at::Tensor& beta,
                               const std::optional<at::Tensor>& log_decay, double scale, const at::Tensor& state0,
                               const at::Tensor& grad_state) {
  const auto qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();  // each copied at most once
  const auto decay = log_decay.has_value() ? log_decay->contiguous() : at::Tensor();
  const auto prepared = prepare(d, kc, vc, beta.contiguous(), decay, true);
  const Chunks x(qc, kc, vc, beta, prepared);
  const auto swept = forward_sweep(d, prepared.u0, prepared.w, prepared.fk, prepared.whole, state0, q);
  const auto g = grad_out.to(q.scalar_type()).contiguous();
  const auto [p, qe, dos, r0, rt] = backward_operands(d, qc, kc, g, prepared, scale);
  auto grads = at::empty_like(swept.states), dr = at::empty_like(swept.u), d_state0 = at::empty_like(swept.last);
  SweepArgs a = sweep_args(d, x.whole, grad_state);
  a.prepared = r0.data_ptr<float>(), a.left = rt.data_ptr<float>(), a.right = qe.data_ptr<float>();
  a.third = x.kb.data_ptr<float>(), a.dos = dos.data_ptr<float>();
  a.states = grads.data_ptr<float>(), a.rows = dr.data_ptr<float>(), a.last = d_state0.data_ptr<float>();
  with_split([&](auto split) {
    chunk::runtime::launch(delta_sweep::delta_backward_sweep_kernel<decltype(split)::value>, d.heads * d.value_tiles,
                           tile::kThreads, SweepLayout(d.cp, d.mt).bytes, a);
  });
  const auto [dq, dk, dv, terms] = gradients(x, p, swept.fk, qe, dos, swept.states, swept.u, grads, dr, q);
  const auto [d_beta, d_log_decay] = row_terms(d, terms, swept.states, grads, x.whole, q, log_decay.has_value());
  return {dq, dk, dv, d_beta, d_log_decay, d_state0};
}

}  // namespace delta_cuda
}  // namespace lintf
