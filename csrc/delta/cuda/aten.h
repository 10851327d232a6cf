// The part of the CUDA delta rule's backward that runs in ATen (batched over heads and chunks, fp32): the
// inputs in chunks and the products and terms of dq, dk and dv after the sweeps (sweeps.cuh); the chunks'
// terms come from chunk.cuh, the sweeps' operands from chunk.cuh and backward_operands.cuh, d beta and
// d log_decay from row_terms.cuh. Notation (as ../delta_rule.h, chunks of kChunk = 64): b the cumulative log-decay
// inside a chunk, e = exp(b), f = exp(B - b), D[t][s] = exp(b_t - b_s) on and below the diagonal,
// h = (K K^T) o D strictly below it, T = (I + diag(beta) h)^{-1}, P = (Q K^T) o D. Forward:
//   W = T diag(beta e) K, U0 = T diag(beta) V, F = diag(f) K   -> sweep: S_c, U_c = U0 - W S_c
//   out = scale (diag(e) Q S_c + P U_c)
// Backward (dO = scale grad_out; the sweep gives dS_c = dL/dS after chunk c and dR_c = T^T dU_c, with
// dU = P^T dO + F dS_c), as the CPU kernel (../cpu/sweeps.h; d beta, d log_decay: row_terms.cuh):
//   X = V - diag(e) K S_c,
//   dP = dO U^T,  dQ = (dP o D) K + diag(e) dO S_c^T,  dK = (dP o D)^T Q + diag(f) U dS_c^T + (dH + dH^T) K
//     - diag(e) dX S_c^T,  dV = dX = diag(beta) dR,  dA = -(dR U^T) strictly lower, dH = diag(beta) dA o D,
//   d beta = rows of dR . X + rows of dA . h,
// and d log_decay the reverse cumulative sum inside the chunk of sum_s Z[t][s] - sum_s Z[s][t] + e de - f df
// (+ exp(B) <S_c, dS_c> + sum_s f_s df_s at the last row), Z = dP o P + dA o diag(beta) h.
#pragma once

#include <ATen/ATen.h>

#include <optional>

namespace lintf {
namespace delta_cuda {

constexpr int64_t kChunk = 64;  // the sweeps' chunk (tile::kChunk, checked in chunk_launch.cuh)

// (B, H, N, F) -> (B * H, nc, kChunk, F) fp32, N zero-padded to nc chunks (zero rows write and decay nothing).
// One pass at most where N fills whole chunks (none for fp32), two with padding.
inline at::Tensor chunked(const at::Tensor& x, int64_t nc) {
  const int64_t heads = x.size(0) * x.size(1), n = x.size(2), features = x.size(3), padding = nc * kChunk - n;
  const auto flat = x.reshape({heads, n, features});
  at::Tensor out;
  if (padding == 0) {
    out = flat.to(at::kFloat);
  } else {
    out = at::empty({heads, nc * kChunk, features}, x.options().dtype(at::kFloat));
    out.narrow(1, 0, n).copy_(flat);
    out.narrow(1, n, padding).zero_();
  }
  return out.contiguous().view({heads, nc, kChunk, features});
}

// (B * H, nc, kChunk, F) -> (B, H, N, F) with (B, H, N) of `like` (B, H, N, .), in dtype.
inline at::Tensor unchunked(const at::Tensor& x, const at::Tensor& like, at::ScalarType dtype) {
  const int64_t n = like.size(2);
  return x.flatten(1, 2).narrow(1, 0, n).reshape({like.size(0), like.size(1), n, x.size(3)}).to(dtype).contiguous();
}

// by * x, or x where `by` is undefined (no decay: every factor exp(0) = 1).
inline at::Tensor weighted(const at::Tensor& by, const at::Tensor& x) { return by.defined() ? by * x : x; }

// (heads, chunks, r, c) -> (heads * chunks, r, c): the batch of a bmm.
inline at::Tensor batch(const at::Tensor& x) { return x.flatten(0, 1); }

// What delta_prepare_kernel (chunk.cuh) writes: the sweep's operands U0 (B*H, nc, L, M), W, F (B*H, nc, L, C),
// b (B*H, nc, L), exp(B) (B*H, nc); for the backward also e, f (B*H, nc, L), D, h, a, T (B*H, nc, L, L),
// ek, kb (B*H, nc, L, C) (e, f, D, ek undefined without decay; all of them undefined in the forward).
struct Prepared {
  at::Tensor u0, w, fk, cumulative, whole;
  at::Tensor e, f, decay, h, a, tinv, ek, kb;
};

// One call's chunks: q, k, v (B*H, nc, L, .), beta (B*H, nc, L, 1), whole = exp(B) (B*H, nc), h and T
// (B*H, nc, L, L), a = diag(beta) h; with log_decay also e, f (B*H, nc, L, 1) and D (B*H, nc, L, L), which are
// undefined without it (all ones, D the lower triangle). ek = diag(e) K, kb = diag(beta e) K. All but q, k, v
// and beta come from delta_prepare_kernel.
struct Chunks {
  at::Tensor q, k, v, beta, e, f, whole, decay, h, a, tinv, ek, kb;
  int64_t count;

  Chunks(const at::Tensor& q_, const at::Tensor& k_, const at::Tensor& v_, const at::Tensor& beta_,
         const Prepared& p)
      : count((q_.size(2) + kChunk - 1) / kChunk) {
    q = chunked(q_, count), k = chunked(k_, count), v = chunked(v_, count);
    beta = chunked(beta_.unsqueeze(3), count);
    const auto rows = [&](const at::Tensor& t) { return t.defined() ? t.unsqueeze(3) : t; };  // (B*H, nc, L, 1)
    e = rows(p.e), f = rows(p.f), whole = p.whole, decay = p.decay, h = p.h, a = p.a, tinv = p.tinv;
    ek = p.ek.defined() ? p.ek : k, kb = p.kb;
  }
};

// What the per-row gradient terms (d beta, d log_decay: row_terms.cuh) read, all (B*H, nc, kChunk, .) fp32.
struct RowTermOperands {
  at::Tensor dp, p, na, a, h, qe, dos_st, ek, rows, fk, u_dst, dr, xs;
};

// dq, dk, dv (the inputs' dtype) and the operands of the per-row terms from P, the backward operands F and Qe,
// the sweeps' S_c, U_c (forward) and dS_c, dR_c (backward). na = -dA = (dR U^T) strictly lower.
inline std::tuple<at::Tensor, at::Tensor, at::Tensor, RowTermOperands> gradients(
    const Chunks& x, const at::Tensor& p, const at::Tensor& fk, const at::Tensor& qe, const at::Tensor& dos,
    const at::Tensor& states, const at::Tensor& u, const at::Tensor& grads, const at::Tensor& dr,
    const at::Tensor& q) {
  const auto states_t = states.transpose(2, 3), u_t = u.transpose(2, 3);
  const auto dp = at::matmul(dos, u_t);
  const auto dpd = x.decay.defined() ? dp * x.decay : dp.tril();
  const auto dos_st = at::matmul(dos, states_t), u_dst = at::matmul(u, grads.transpose(2, 3));
  const auto na = at::matmul(dr, u_t).tril_(-1);
  const auto dx = x.beta * dr;
  const auto rows = at::matmul(dx, states_t);
  const auto ndh = weighted(x.decay, na * x.beta);  // -dH = -diag(beta) dA o D
  const auto dq = at::baddbmm(batch(weighted(x.e, dos_st)), batch(dpd), batch(x.k)).view_as(x.q);
  const auto fu = weighted(x.f, u_dst);
  auto dk = fu - weighted(x.e, rows);
  dk = at::baddbmm(batch(dk), batch(dpd.transpose(2, 3)), batch(x.q));
  dk = at::baddbmm(dk, batch(ndh + ndh.transpose(2, 3)), batch(x.k), 1, -1).view_as(x.k);
  const auto xs = at::baddbmm(batch(x.v), batch(x.ek), batch(states), 1, -1).view_as(x.v);  // X = V - diag(e) K S_c
  const auto dtype = q.scalar_type();
  return {unchunked(dq, q, dtype), unchunked(dk, q, dtype), unchunked(dx, q, dtype),
          RowTermOperands{dp, p, na, x.a, x.h, qe, dos_st, x.ek, rows, fk, u_dst, dr, xs}};
}

}  // namespace delta_cuda
}  // namespace lintf
