// Per-head passes of the CPU delta rule (the HeadPasses of one vector path; semantics, chunked form and
// the backward's memory in ../delta_rule.h, the shared chunk steps in chunk.h). Included once by each
// delta_rule_<path>.cpp inside its target region (vector_path.h). Internal linkage throughout.
//
// The backward of one chunk, with dO = scale * grad, dS = dL/dS_out, P = (Q K^T) o G (lower), and
// Z = dL/dG o G collecting what every decay factor receives:
//   dU = P^T dO + diag(exp(b_L - b)) K dS            dP = dO U^T
//   dQ = (dP o G) K + diag(exp(b)) dO S_in^T        dK = (dP o G)^T Q + diag(exp(b_L - b)) U dS^T + ...
//   dR = tinv^T dU,  dA = -dR U^T (strictly lower),  dX = diag(beta) dR = dV,  d beta = rows of dR . X + dA . h
//   dK += (dH + dH^T) K - diag(exp(b)) dX S_in^T    with dH = diag(beta) dA o G
//   dS_in = exp(b_L) dS + (diag(exp(b)) Q)^T dO - (diag(exp(b)) K)^T dX
// and d log_decay the reverse cumulative sum inside the chunk of
//   db_t = sum_s Z[t][s] - sum_s Z[s][t] + exp(b_t) d exp(b_t) - exp(b_L - b_t) d exp(b_L - b_t)
//          (+ exp(b_L) <S_in, dS> + sum_s exp(b_L - b_s) d exp(b_L - b_s) at the last row).
#pragma once

#include "delta/cpu/chunk.h"

namespace lintf::delta {
namespace {

template <typename scalar_t, typename T>
void forward_chunk(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t t0, T* state, Workspace<T>& w) {
  prepare(d, a, head, t0, w);
  updates(d, a, head, t0, state, w);
  w.q = cpu::pack(rows_of(a.q, d, head, t0, d.c), w.rows_in_chunk, d.c, d.cp, w.qbuf, static_cast<T*>(nullptr));
  tile::gemm<T>(L, L, d.cp, w.q, d.cp, w.kt, L, w.p, L, false, Shape::kLowerOut);
  apply_decay(w.p, w.decay);
  tile::gemm<T>(L, d.mp, L, w.p, L, w.u, d.mp, w.dx, d.mp, false, Shape::kLowerA);
  scale_rows(w.q, w.e, d.cp, w.scaled);
  tile::gemm<T>(L, d.mp, d.cp, w.scaled, d.cp, state, d.mp, w.dx, d.mp, true);
  advance(d, state, state, w);
  store(w.dx, w.rows_in_chunk, d.m, d.mp, a.scale, rows_of(a.out, d, head, t0, d.m));
}

// dU, then dQ, dK from P, dK from dS, the decay terms of exp(b_L - b) (df), Z.
template <typename T>
void output_gradients(const Dims& d, const T* grad_state, Workspace<T>& w) {
  tile::gemm<T>(L, L, d.cp, w.q, d.cp, w.kt, L, w.p, L, false, Shape::kLowerOut);
  apply_decay(w.p, w.decay);
  cpu::transpose(w.p, L, L, w.pt);
  tile::gemm<T>(L, d.mp, L, w.pt, L, w.dos, d.mp, w.du, d.mp, false, Shape::kUpperA);
  scale_rows(w.k, w.f, d.cp, w.scaled);
  tile::gemm<T>(L, d.mp, d.cp, w.scaled, d.cp, grad_state, d.mp, w.du, d.mp, true);
  cpu::transpose(w.u, L, d.mp, w.ut);
  tile::gemm<T>(L, L, d.mp, w.dos, d.mp, w.ut, L, w.dp, L, false, Shape::kLowerOut);
  for (int64_t i = 0; i < L * L; ++i) w.z[i] = w.dp[i] * w.p[i];  // dP o P is dG o G
  apply_decay(w.dp, w.decay);  // zeroes Z above the diagonal too, as P is zero there
  tile::gemm<T>(L, d.cp, L, w.dp, L, w.k, d.cp, w.dq, d.cp, false, Shape::kLowerA);
  cpu::transpose(w.dp, L, L, w.dpt);
  tile::gemm<T>(L, d.cp, L, w.dpt, L, w.q, d.cp, w.dk, d.cp, false, Shape::kUpperA);
  tile::gemm<T>(d.cp, L, d.mp, grad_state, d.mp, w.ut, L, w.cols, L, false);  // dS U^T: dS read once
  cpu::transpose(w.cols, d.cp, L, w.rows);                                     // U dS^T
  for (int64_t t = 0; t < L; ++t) {
    w.df[t] = tile::dot<T>(w.k + t * d.cp, w.rows + t * d.cp, d.cp);
    for (int64_t c = 0; c < d.cp; ++c) w.dk[t * d.cp + c] += w.f[t] * w.rows[t * d.cp + c];
  }
}

// Through the triangular solve: dR (in w.r), dA into Z and d beta, dK from dH, dX (= dV).
template <typename T>
void solve_gradients(const Dims& d, const T* x, T* d_beta, Workspace<T>& w) {
  cpu::transpose(w.tinv, L, L, w.tinvt);
  tile::gemm<T>(L, d.mp, L, w.tinvt, L, w.du, d.mp, w.r, d.mp, false, Shape::kUpperA);
  tile::gemm<T>(L, L, d.mp, w.r, d.mp, w.ut, L, w.da, L, false, Shape::kLowerOut);
  for (int64_t t = 0; t < L; ++t) {
    T gradient = tile::dot<T>(w.r + t * d.mp, x + t * d.mp, d.mp);
    for (int64_t s = 0; s < L; ++s) {
      const int64_t i = t * L + s;
      const T da = s < t ? -w.da[i] : T(0);
      gradient += da * w.h[i];
      w.z[i] += da * w.beta[t] * w.h[i];
      w.da[i] = da * w.beta[t] * w.decay[i];  // dH, strictly lower
    }
    for (int64_t c = 0; c < d.mp; ++c) w.dx[t * d.mp + c] = w.beta[t] * w.r[t * d.mp + c];
    d_beta[t] = gradient;  // may overwrite beta_t, read last just above
  }
  tile::gemm<T>(L, d.cp, L, w.da, L, w.k, d.cp, w.dk, d.cp, true, Shape::kLowerA);
  cpu::transpose(w.da, L, L, w.dat);
  tile::gemm<T>(L, d.cp, L, w.dat, L, w.k, d.cp, w.dk, d.cp, true, Shape::kUpperA);
}

// The products with S_in^T, [dO; dX] S_in^T in one (dos and dx are adjacent): dQ, dK and de.
template <typename T>
void entering_state_gradients(const Dims& d, const T* state, Workspace<T>& w) {
  cpu::transpose(w.dos, 2 * L, d.mp, w.dost);
  tile::gemm<T>(d.cp, 2 * L, d.mp, state, d.mp, w.dost, 2 * L, w.cols, 2 * L, false);  // S_in [dO; dX]^T
  cpu::transpose(w.cols, d.cp, 2 * L, w.rows);  // [dO; dX] S_in^T: S_in (cold) is read once, row by row
  const T* dx_rows = w.rows + L * d.cp;
  for (int64_t t = 0; t < L; ++t) {
    w.de[t] = tile::dot<T>(w.q + t * d.cp, w.rows + t * d.cp, d.cp);
    for (int64_t c = 0; c < d.cp; ++c) w.dq[t * d.cp + c] += w.e[t] * w.rows[t * d.cp + c];
    w.de[t] -= tile::dot<T>(w.k + t * d.cp, dx_rows + t * d.cp, d.cp);
    for (int64_t c = 0; c < d.cp; ++c) w.dk[t * d.cp + c] -= w.e[t] * dx_rows[t * d.cp + c];
  }
}

// grad_state = exp(b_L) grad_state + (diag(exp(b)) Q)^T dO - (diag(exp(b)) K)^T dX, one product of depth 2L.
template <typename T>
void carry_state_gradient(const Dims& d, T* grad_state, Workspace<T>& w) {
  for (int64_t i = 0; i < d.cp * d.mp; ++i) grad_state[i] *= w.whole;
  for (int64_t c = 0; c < d.cp; ++c) {
    for (int64_t s = 0; s < L; ++s) {
      w.cols[c * 2 * L + s] = w.e[s] * w.qt[c * L + s];
      w.cols[c * 2 * L + L + s] = -w.e[s] * w.kt[c * L + s];
    }
  }
  tile::gemm<T>(d.cp, d.mp, 2 * L, w.cols, 2 * L, w.dos, d.mp, grad_state, d.mp, true);
}

// d log_decay of the chunk's rows from Z, de, df and <S_in, dS> (see the top of this file).
template <typename T>
void decay_gradients(T state_product, int64_t rows, T* d_log_decay, Workspace<T>& w) {
  T to_end = 0;
  for (int64_t s = 0; s < L; ++s) to_end += w.f[s] * w.df[s];
  T suffix = 0;
  for (int64_t t = L - 1; t >= 0; --t) {
    T gradient = w.e[t] * w.de[t] - w.f[t] * w.df[t];
    for (int64_t s = 0; s < L; ++s) gradient += w.z[t * L + s] - w.z[s * L + t];
    if (t == L - 1) gradient += w.whole * state_product + to_end;
    suffix += gradient;
    if (t < rows) d_log_decay[t] = suffix;
  }
}

// The chunk's gradients given its entering state, X, h and tinv (kept by the forward sweep) and grad_state =
// dL/dS_out, which becomes dL/dS_in.
template <typename scalar_t, typename T>
void backward_chunk(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t t0, const T* state,
                    const T* x, T* grad_state, Workspace<T>& w) {
  chunk_inputs(d, a, head, t0, w);  // w.h, w.tinv: kept by the forward sweep
  solve_updates(d, x, w);
  const int64_t rows = w.rows_in_chunk;
  w.q = cpu::pack(rows_of(a.q, d, head, t0, d.c), rows, d.c, d.cp, w.qbuf, w.qt);
  const T* g = cpu::pack(rows_of(a.grad, d, head, t0, d.m), rows, d.m, d.mp, w.gbuf, static_cast<T*>(nullptr));
  for (int64_t i = 0; i < L * d.mp; ++i) w.dos[i] = a.scale * g[i];
  output_gradients(d, grad_state, w);
  solve_gradients(d, x, w.beta, w);  // d beta into w.beta: beta itself is not read after this
  entering_state_gradients(d, state, w);
  T state_product = 0;  // <S_in, dS>: only the decay's gradient reads it
  if (a.d_log_decay != nullptr) state_product = tile::dot<T>(state, grad_state, d.cp * d.mp);
  carry_state_gradient(d, grad_state, w);
  if (a.d_log_decay != nullptr) decay_gradients(state_product, rows, rows_of(a.d_log_decay, d, head, t0, 1), w);
  store(w.dq, rows, d.c, d.cp, T(1), rows_of(a.dq, d, head, t0, d.c));
  store(w.dk, rows, d.c, d.cp, T(1), rows_of(a.dk, d, head, t0, d.c));
  store(w.dx, rows, d.m, d.mp, T(1), rows_of(a.dv, d, head, t0, d.m));
  std::copy(w.beta, w.beta + rows, rows_of(a.d_beta, d, head, t0, 1));
}

template <typename scalar_t, typename T>
void forward_head(const Dims& d, const Args<scalar_t, T>& a, int64_t head) {
  Workspace<T> w(d);
  cpu::AlignedBuffer<T> state(d.cp * d.mp);
  load_state(state_of(a.state0, d, head), d, state.data());
  for (int64_t t0 = 0; t0 < d.n; t0 += L) forward_chunk(d, a, head, t0, state.data(), w);
  save_state(state.data(), d, state_of(a.state_out, d, head));
}

// dst = src (n elements, both vector-aligned). Streamed when a head's kept copies are too large for L2
// (a.streamed_kept_bytes): written once and read back only by the reverse sweep, they then neither need
// their lines read first nor a place in the caches; smaller ones stay cached for the reverse sweep.
template <typename T>
void keep(const T* src, int64_t n, T* dst, bool streamed) {
  if (!streamed) return void(std::copy(src, src + n, dst));
  for (int64_t i = 0; i < n; i += tile::kWidth<T>) tile::stream<T>(dst + i, tile::load<T>(src + i));
}

// A forward sweep on a running state that stays in the caches keeps a copy of the state entering every
// chunk and the chunk's X, h and tinv (kept.h); the reverse sweep carries dL/dS through them.
template <typename scalar_t, typename T>
void backward_head(const Dims& d, const Args<scalar_t, T>& a, int64_t head) {
  Workspace<T> w(d);
  Kept<T> kept(d.chunks, d.cp * d.mp, L * d.mp, L * L);
  const bool streamed = d.chunks * (d.cp * d.mp + L * d.mp + 2 * L * L) * int64_t(sizeof(T)) >= a.streamed_kept_bytes;
  cpu::AlignedBuffer<T> state(d.cp * d.mp), grad_state(d.cp * d.mp);
  load_state(state_of(a.state0, d, head), d, state.data());
  for (int64_t chunk = 0; chunk < d.chunks; ++chunk) {
    keep(state.data(), d.cp * d.mp, kept.state(chunk), streamed);
    w.h = kept.h(chunk), w.tinv = kept.tinv(chunk), w.x = kept.x(chunk);  // prepare, updates write there
    prepare(d, a, head, chunk * L, w);
    updates(d, a, head, chunk * L, state.data(), w);
    if (chunk + 1 < d.chunks) advance(d, state.data(), state.data(), w);
  }
  tile::fence();
  load_state(state_of(a.grad_state, d, head), d, grad_state.data());
  for (int64_t chunk = d.chunks - 1; chunk >= 0; --chunk) {
    w.h = kept.h(chunk), w.tinv = kept.tinv(chunk);
    backward_chunk(d, a, head, chunk * L, kept.state(chunk), kept.x(chunk), grad_state.data(), w);
  }
  save_state(grad_state.data(), d, state_of(a.state_out, d, head));
}

template <typename scalar_t, typename T>
constexpr cpu::HeadPasses<Args, scalar_t, T> kPasses{&forward_head<scalar_t, T>, &backward_head<scalar_t, T>};

}  // namespace
}  // namespace lintf::delta
