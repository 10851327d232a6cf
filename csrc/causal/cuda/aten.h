// The causal product in ATen operations, on any device: the CUDA op's path for what neither CUDA kernel
// takes (heads too wide for their shared memory, empty dimensions). It follows the chunked kernels'
// decomposition (chunk*.cuh) with batched matmuls in the accumulation dtype, so it
// accepts every size and dtype the CPU op does.
#pragma once

#include "causal/causal_product.h"

#include <algorithm>

namespace lintf {
namespace aten_path {

constexpr int64_t kChunk = 64;

// (B, H, N, F) -> (B, H, N / L, L, F), N zero-padded to a multiple of L (zero rows add nothing).
inline at::Tensor chunks(const at::Tensor& x, int64_t length) {
  const int64_t n = x.size(2), padding = (length - n % length) % length;
  const auto padded = padding > 0 ? at::constant_pad_nd(x, {0, 0, 0, padding}) : x;
  return padded.reshape({x.size(0), x.size(1), (n + padding) / length, length, x.size(3)});
}

inline at::Tensor unchunked(const at::Tensor& x, int64_t n) {
  return x.flatten(2, 3).narrow(2, 0, n);
}

// The state before each chunk (dim 2): start plus the chunk states before it (after it when reverse).
inline at::Tensor exclusive_scan(const at::Tensor& per_chunk, const std::optional<at::Tensor>& start, bool reverse) {
  const int64_t count = per_chunk.size(2);
  const auto x = reverse ? per_chunk.flip(2) : per_chunk;
  auto shifted = at::zeros_like(x);
  if (count > 1) shifted.narrow(2, 1, count - 1).copy_(x.narrow(2, 0, count - 1).cumsum(2));
  if (start.has_value()) shifted = shifted + start->unsqueeze(2);
  return reverse ? shifted.flip(2) : shifted;
}

inline int64_t chunk_length(int64_t n) {
  return std::max<int64_t>(1, std::min(kChunk, n));
}

inline ForwardResult forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double eps, bool normalize,
                             const std::optional<at::Tensor>& kv0, const std::optional<at::Tensor>& z0) {
  const auto acc = accumulation_type(v.scalar_type());
  const int64_t n = q.size(2), length = chunk_length(n);
  const auto qc = chunks(q.to(acc), length), kc = chunks(k.to(acc), length), vc = chunks(v.to(acc), length);
  const auto a = at::matmul(qc, kc.transpose(-1, -2)).tril();   // (B, H, nc, L, L)
  const auto kv_chunks = at::matmul(kc.transpose(-1, -2), vc);  // (B, H, nc, C, M)
  const auto z_chunks = kc.sum(3);                              // (B, H, nc, C)
  auto numerator = at::matmul(a, vc) + at::matmul(qc, exclusive_scan(kv_chunks, kv0, false));
  auto kv_final = kv_chunks.sum(2), z_final = z_chunks.sum(2);
  if (kv0.has_value()) kv_final = kv_final + *kv0;
  if (z0.has_value()) z_final = z_final + *z0;
  auto den = at::empty({0}, v.options().dtype(acc));
  if (normalize) {
    const auto z_before = exclusive_scan(z_chunks, z0, false);                           // (B, H, nc, C)
    const auto den_chunks = a.sum(-1) + (qc * z_before.unsqueeze(3)).sum(-1) + eps;    // (B, H, nc, L)
    numerator = numerator / den_chunks.unsqueeze(-1);
    den = unchunked(den_chunks.unsqueeze(-1), n).squeeze(-1).contiguous();              // (B, H, N)
  }
  return {unchunked(numerator, n).to(v.scalar_type()).contiguous(), den, kv_final.contiguous(), z_final.contiguous()};
}

// Gradients as in chunk_backward.cuh: G = grad / den, gd = -(grad . out) / den.
inline BackwardResult backward(const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
                               const at::Tensor& v, const at::Tensor& out, const at::Tensor& denominator,
                               bool normalize, const std::optional<at::Tensor>& kv0,
                               const std::optional<at::Tensor>& z0, const std::optional<at::Tensor>& grad_kv,
                               const std::optional<at::Tensor>& grad_z) {
  const auto acc = accumulation_type(v.scalar_type());
  const int64_t n = q.size(2), length = chunk_length(n);
  auto g = grad_out.to(acc);
  auto gd = at::zeros({q.size(0), q.size(1), n}, g.options());
  if (normalize) {
    const auto inv = denominator.to(acc).reciprocal();  // (B, H, N)
    gd = -(g * out.to(acc)).sum(3) * inv;
    g = g * inv.unsqueeze(3);
  }
  const auto qc = chunks(q.to(acc), length), kc = chunks(k.to(acc), length), vc = chunks(v.to(acc), length);
  const auto gc = chunks(g, length), gdc = chunks(gd.unsqueeze(3), length);  // gdc: (B, H, nc, L, 1)
  const auto a = at::matmul(qc, kc.transpose(-1, -2)).tril();                 // [i, j] = q_i . k_j, j <= i
  const auto d = (at::matmul(gc, vc.transpose(-1, -2)) + gdc).tril();         // [i, j] = G_i . v_j + gd_i, j <= i
  const auto s_before = exclusive_scan(at::matmul(kc.transpose(-1, -2), vc), kv0, false);  // (B, H, nc, C, M)
  const auto z_before = exclusive_scan(kc.sum(3), z0, false);                               // (B, H, nc, C)
  const auto ds_chunks = at::matmul(qc.transpose(-1, -2), gc);                              // (B, H, nc, C, M)
  const auto dz_chunks = at::matmul(qc.transpose(-1, -2), gdc).squeeze(-1);                 // (B, H, nc, C)
  const auto ds_after = exclusive_scan(ds_chunks, grad_kv, true);
  const auto dz_after = exclusive_scan(dz_chunks, grad_z, true);
  const auto dq = at::matmul(d, kc) + at::matmul(gc, s_before.transpose(-1, -2)) + gdc * z_before.unsqueeze(3);
  const auto dk = at::matmul(d.transpose(-1, -2), qc) + at::matmul(vc, ds_after.transpose(-1, -2)) +
                  dz_after.unsqueeze(3);
  const auto dv = at::matmul(a.transpose(-1, -2), gc) + at::matmul(kc, ds_after);
  auto d_kv0 = ds_chunks.sum(2), d_z0 = dz_chunks.sum(2);
  if (grad_kv.has_value()) d_kv0 = d_kv0 + *grad_kv;
  if (grad_z.has_value()) d_z0 = d_z0 + *grad_z;
  const auto dtype = v.scalar_type();
  return {unchunked(dq, n).to(dtype).contiguous(), unchunked(dk, n).to(dtype).contiguous(),
          unchunked(dv, n).to(dtype).contiguous(), d_kv0.contiguous(), d_z0.contiguous()};
}

}  // namespace aten_path
}  // namespace lintf
