// The decayed causal product in ATen operations, on any device: the CUDA op's path for what the chunked
// kernels do not take (fp64, more than 128 features, GPUs before sm_80). It follows their decomposition
// (chunk*.cuh) with batched matmuls in the accumulation dtype; the scan over chunks is one matmul with
// the decays between chunk boundaries, exp(E_j - E_i) for boundaries i <= j (E: the cumulative log-decay
// at each boundary), so every exponent is <= 0.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <limits>
#include <tuple>

namespace lintf {
namespace decayed_aten {

constexpr int64_t kChunk = 64;

// (B, H, N, ...) -> (B, H, N / L, L, ...), N zero-padded to a multiple of L (zero rows add and decay nothing).
inline at::Tensor chunks(const at::Tensor& x, int64_t length) {
  const int64_t n = x.size(2), padding = (length - n % length) % length;
  std::vector<int64_t> pad(2 * (x.dim() - 2), 0);
  pad[pad.size() - 1] = padding;
  auto shape = x.sizes().vec();
  shape[2] = (n + padding) / length;
  shape.insert(shape.begin() + 3, length);
  return at::constant_pad_nd(x, pad).reshape(shape);
}

inline at::Tensor unchunked(const at::Tensor& x, int64_t n) { return x.flatten(2, 3).narrow(2, 0, n); }

// exp(x) where keep, 0 elsewhere (masked before the exponent, which may be positive there).
inline at::Tensor masked_exp(const at::Tensor& x, const at::Tensor& keep) {
  return x.masked_fill(keep.logical_not(), -std::numeric_limits<double>::infinity()).exp();
}

// The state at every chunk boundary j = 0..nc (B, H, nc + 1, C, M) from what each chunk adds (B, H, nc, C, M)
// and its total log-decay (B, H, nc). Forward: S_j = exp(E_j) start + sum_{c < j} exp(E_j - E_{c+1}) added_c.
// Reverse (state gradients): R_j = exp(E_nc - E_j) start + sum_{c >= j} exp(E_c - E_j) added_c.
inline at::Tensor boundary_states(const at::Tensor& added, const at::Tensor& totals, const at::Tensor& start,
                                  bool reverse) {
  const int64_t nc = added.size(2);
  const auto e = at::constant_pad_nd(totals.cumsum(2), {1, 0});  // (B, H, nc + 1): E_0 = 0
  const auto j = at::arange(nc + 1, totals.options().dtype(at::kLong)).unsqueeze(1);
  const auto c = at::arange(nc, totals.options().dtype(at::kLong)).unsqueeze(0);
  const auto boundary = e.unsqueeze(3);  // E_j: (B, H, nc + 1, 1)
  const auto weights = reverse ? masked_exp(e.narrow(2, 0, nc).unsqueeze(2) - boundary, c >= j)
                               : masked_exp(boundary - e.narrow(2, 1, nc).unsqueeze(2), c < j);  // (B, H, nc + 1, nc)
  auto states = at::matmul(weights, added.flatten(3)).unflatten(3, {added.size(3), added.size(4)});
  if (start.defined()) {
    const auto from_start = reverse ? e.narrow(2, nc, 1) - e : e;  // (B, H, nc + 1)
    states = states + from_start.exp().unsqueeze(3).unsqueeze(4) * start.unsqueeze(2);
  }
  return states;
}

// Chunked inputs of one call: q, k, v (and g) (B, H, nc, L, F), b the in-chunk cumulative log-decays
// (B, H, nc, L), to_end = exp(B - b), to_start = exp(b), d = D (L x L per chunk).
struct Chunked {
  at::Tensor q, k, v, b, totals, to_start, to_end, d;
  Chunked(const at::Tensor& q_, const at::Tensor& k_, const at::Tensor& v_, const at::Tensor& log_decay) {
    const auto acc = log_decay.scalar_type();
    const int64_t length = std::max<int64_t>(1, std::min(kChunk, q_.size(2)));
    q = chunks(q_.to(acc), length), k = chunks(k_.to(acc), length), v = chunks(v_.to(acc), length);
    b = chunks(log_decay, length).cumsum(3);
    totals = b.select(3, length - 1);
    to_start = b.exp().unsqueeze(4);
    to_end = (totals.unsqueeze(3) - b).exp().unsqueeze(4);
    const auto below = at::ones({length, length}, log_decay.options().dtype(at::kBool)).tril();
    d = masked_exp(b.unsqueeze(4) - b.unsqueeze(3), below);
  }
};

// Returns out (v's dtype) and the final state; start: (B, H, C, M) in the accumulation dtype, or undefined.
inline std::tuple<at::Tensor, at::Tensor> forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                  const at::Tensor& log_decay, const at::Tensor& start) {
  const Chunked x(q, k, v, log_decay);
  const auto added = at::matmul((x.k * x.to_end).transpose(-1, -2), x.v);  // (B, H, nc, C, M)
  const auto states = boundary_states(added, x.totals, start, false);
  const int64_t nc = added.size(2);
  const auto out = at::matmul(at::matmul(x.q, x.k.transpose(-1, -2)) * x.d, x.v) +
                   at::matmul(x.q * x.to_start, states.narrow(2, 0, nc));
  return {unchunked(out, q.size(2)).to(v.scalar_type()).contiguous(), states.select(2, nc).contiguous()};
}

// Returns dq, dk, dv (the inputs' dtype), d log_decay and dS0 (the accumulation dtype); see chunk_backward.cuh.
inline std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> backward(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& log_decay, const at::Tensor& start, const at::Tensor& grad_state) {
  const Chunked x(q, k, v, log_decay);
  const auto g = chunks(grad_out.to(log_decay.scalar_type()), x.q.size(3));
  const int64_t n = q.size(2), nc = g.size(2);
  const auto states = boundary_states(at::matmul((x.k * x.to_end).transpose(-1, -2), x.v), x.totals, start, false);
  const auto grads = boundary_states(at::matmul((x.q * x.to_start).transpose(-1, -2), g), x.totals, grad_state, true);
  const auto entering = states.narrow(2, 0, nc), after = grads.narrow(2, 1, nc);  // S_c, R_c
  const auto m = at::matmul(g, x.v.transpose(-1, -2)) * x.d;                     // (G V^T) o D
  const auto a = at::matmul(x.q, x.k.transpose(-1, -2)) * x.d;                   // (Q K^T) o D
  const auto dq = at::matmul(m, x.k) + x.to_start * at::matmul(g, entering.transpose(-1, -2));
  const auto dk = at::matmul(m.transpose(-1, -2), x.q) + x.to_end * at::matmul(x.v, after.transpose(-1, -2));
  const auto dv = at::matmul(a.transpose(-1, -2), g) + x.to_end * at::matmul(x.k, after);
  const auto leaving_dot = (after * states.narrow(2, 1, nc)).sum({3, 4});  // x_c = <R_c, S_{c+1}>: (B, H, nc)
  const auto per_position = (x.q * dq).sum(4) - (x.k * dk).sum(4);         // (B, H, nc, L)
  const auto d_log_decay = per_position.flip(3).cumsum(3).flip(3) + leaving_dot.unsqueeze(3);
  const auto dtype = v.scalar_type();
  return {unchunked(dq, n).to(dtype).contiguous(), unchunked(dk, n).to(dtype).contiguous(),
          unchunked(dv, n).to(dtype).contiguous(), unchunked(d_log_decay.unsqueeze(4), n).squeeze(3).contiguous(),
          grads.select(2, 0).contiguous()};
}

}  // namespace decayed_aten
}  // namespace lintf
