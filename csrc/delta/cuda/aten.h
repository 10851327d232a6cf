// The parallel part of the CUDA delta rule in ATen (batched over heads and chunks, fp32): each chunk's UT
// transform and the operands of the sequential sweeps (sweeps.cuh) before them, the outputs and every
// gradient after them. Notation (as ../delta_rule.h, chunks of kChunk = 64): b the cumulative log-decay
// inside a chunk, e = exp(b), f = exp(B - b), D[t][s] = exp(b_t - b_s) on and below the diagonal,
// h = (K K^T) o D strictly below it, T = (I + diag(beta) h)^{-1}, P = (Q K^T) o D. Forward:
//   W = T diag(beta e) K, U0 = T diag(beta) V, F = diag(f) K   -> sweep: S_c, U_c = U0 - W S_c
//   out = scale (diag(e) Q S_c + P U_c)
// Backward (dO = scale grad_out; the sweep gives dS_c = dL/dS after chunk c and dR_c = T^T dU_c, with
// dU = P^T dO + F dS_c), as the CPU kernel (../cpu/sweeps.h): X = V - diag(e) K S_c,
//   dP = dO U^T,  dQ = (dP o D) K + diag(e) dO S_c^T,  dK = (dP o D)^T Q + diag(f) U dS_c^T + (dH + dH^T) K
//     - diag(e) dX S_c^T,  dV = dX = diag(beta) dR,  dA = -(dR U^T) strictly lower, dH = diag(beta) dA o D,
//   d beta = rows of dR . X + rows of dA . h,
// and d log_decay the reverse cumulative sum inside the chunk of sum_s Z[t][s] - sum_s Z[s][t] + e de - f df
// (+ exp(B) <S_c, dS_c> + sum_s f_s df_s at the last row), Z = dP o P + dA o diag(beta) h.
#pragma once

#include <ATen/ATen.h>

#include <limits>
#include <optional>

namespace lintf {
namespace delta_cuda {

constexpr int64_t kChunk = 64;  // the sweeps' chunk (tile::kChunk, checked in chunk_launch.cuh)

// (B, H, N, F) -> (B * H, nc, kChunk, F) fp32, N zero-padded to nc chunks (zero rows write and decay nothing).
inline at::Tensor chunked(const at::Tensor& x, int64_t nc) {
  const int64_t heads = x.size(0) * x.size(1), n = x.size(2), padding = nc * kChunk - n;
  const auto flat = x.to(at::kFloat).reshape({heads, n, x.size(3)});
  return at::constant_pad_nd(flat, {0, 0, 0, padding}).reshape({heads, nc, kChunk, x.size(3)});
}

// (B * H, nc, kChunk, F) -> (B, H, N, F) with (B, H, N) of `like` (B, H, N, .), in dtype.
inline at::Tensor unchunked(const at::Tensor& x, const at::Tensor& like, at::ScalarType dtype) {
  const int64_t n = like.size(2);
  return x.flatten(1, 2).narrow(1, 0, n).reshape({like.size(0), like.size(1), n, x.size(3)}).to(dtype).contiguous();
}

// One call's chunks: q, k, v (B*H, nc, L, .), beta, e, f (B*H, nc, L, 1), whole = exp(B) (B*H, nc), D, h, T
// (B*H, nc, L, L).
struct Chunks {
  at::Tensor q, k, v, beta, e, f, whole, decay, h, tinv;
  int64_t count;

  Chunks(const at::Tensor& q_, const at::Tensor& k_, const at::Tensor& v_, const at::Tensor& beta_,
         const std::optional<at::Tensor>& log_decay)
      : count((q_.size(2) + kChunk - 1) / kChunk) {
    q = chunked(q_, count), k = chunked(k_, count), v = chunked(v_, count);
    beta = chunked(beta_.unsqueeze(3), count);
    const auto b = log_decay.has_value() ? chunked(log_decay->unsqueeze(3), count).cumsum(2) : at::zeros_like(beta);
    const auto total = b.narrow(2, kChunk - 1, 1);  // (B*H, nc, 1, 1)
    e = b.exp(), f = (total - b).exp(), whole = total.flatten(1).exp().contiguous();
    const auto lower = at::ones({kChunk, kChunk}, q.options().dtype(at::kBool)).tril();
    const auto exponent = b - b.transpose(2, 3);  // b_t - b_s: (B*H, nc, L, L)
    decay = exponent.masked_fill(lower.logical_not(), -std::numeric_limits<float>::infinity()).exp();
    h = (at::matmul(k, k.transpose(2, 3)) * decay).tril(-1);
    const auto eye = at::eye(kChunk, q.options());
    tinv = at::linalg_solve_triangular(eye + beta * h, eye.expand_as(h), /*upper=*/false, /*left=*/true,
                                       /*unitriangular=*/true);
  }

  // What the forward sweep reads: U0, W, F (contiguous).
  std::tuple<at::Tensor, at::Tensor, at::Tensor> forward_operands() const {
    return {at::matmul(tinv, beta * v).contiguous(), at::matmul(tinv, beta * e * k).contiguous(),
            (f * k).contiguous()};
  }

  at::Tensor scores() const { return at::matmul(q, k.transpose(2, 3)) * decay; }  // P
};

// out (v's dtype, (B, H, N, M)) from the chunks, the states entering each chunk and the sweep's U.
inline at::Tensor outputs(const Chunks& x, const at::Tensor& states, const at::Tensor& u, double scale,
                          const at::Tensor& v) {
  const auto out = x.e * at::matmul(x.q, states) + at::matmul(x.scores(), u);
  return unchunked(out * scale, v, v.scalar_type());
}

// What the backward sweep reads: R0 = T^T P^T dO, Rt = T^T F, Qe, Kb (contiguous).
inline std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> backward_operands(const Chunks& x,
                                                                                  const at::Tensor& dos) {
  const auto tinv_t = x.tinv.transpose(2, 3);
  return {at::matmul(tinv_t, at::matmul(x.scores().transpose(2, 3), dos)).contiguous(),
          at::matmul(tinv_t, x.f * x.k).contiguous(), (x.e * x.q).contiguous(), (x.beta * x.e * x.k).contiguous()};
}

// dq, dk, dv (the inputs' dtype), d beta, d log_decay (fp32; empty without log_decay) from the sweeps' S_c,
// U_c (forward) and dS_c, dR_c (backward).
inline std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gradients(
    const Chunks& x, const at::Tensor& dos, const at::Tensor& states, const at::Tensor& u, const at::Tensor& grads,
    const at::Tensor& dr, const at::Tensor& q, bool with_decay) {
  const auto p = x.scores(), states_t = states.transpose(2, 3), u_t = u.transpose(2, 3);
  const auto dp = at::matmul(dos, u_t);
  auto z = dp * p;
  const auto dpd = dp * x.decay;
  const auto dos_st = at::matmul(dos, states_t), u_dst = at::matmul(u, grads.transpose(2, 3));
  const auto da = -at::matmul(dr, u_t).tril(-1);
  const auto dx = x.beta * dr;
  const auto rows = at::matmul(dx, states_t);
  const auto dh = da * x.beta * x.decay;
  const auto dq = at::matmul(dpd, x.k) + x.e * dos_st;
  const auto dk = at::matmul(dpd.transpose(2, 3), x.q) + x.f * u_dst + at::matmul(dh + dh.transpose(2, 3), x.k) -
                  x.e * rows;
  const auto xs = x.v - x.e * at::matmul(x.k, states);  // X
  const auto d_beta = (dr * xs).sum(3, true) + (da * x.h).sum(3, true);
  const auto dtype = q.scalar_type();
  auto d_log_decay = at::empty({0}, dos.options());
  if (with_decay) {
    z = z + da * x.beta * x.h;
    const auto de = (x.q * dos_st).sum(3, true) - (x.k * rows).sum(3, true), df = (x.k * u_dst).sum(3, true);
    auto db = z.sum(3, true) - z.sum(2).unsqueeze(3) + x.e * de - x.f * df;  // (B*H, nc, L, 1)
    const auto last = x.whole * (states * grads).sum({2, 3}) + (x.f * df).sum({2, 3});  // (B*H, nc)
    db.select(2, kChunk - 1).squeeze(2).add_(last);
    d_log_decay = unchunked(db.flip(2).cumsum(2).flip(2), q, at::kFloat).squeeze(3);
  }
  return {unchunked(dq, q, dtype), unchunked(dk, q, dtype), unchunked(dx, q, dtype),
          unchunked(d_beta, q, at::kFloat).squeeze(3), d_log_decay};
}

}  // namespace delta_cuda
}  // namespace lintf
