// Per-head passes of the CPU gated linear attention (the HeadPasses of one vector path; semantics and the
// chunked form in ../gla.h). Included once by each gla_<path>.cpp inside its target region
// (vector_path.h). The chunk-wide products (with the states, and scores times values) are tile::gemm
// calls on packed kChunk-row tiles; the in-chunk decays are running products over pairs of positions,
// about C multiply-adds per pair. Shares the layout helpers of the delta rule's chunk (delta/cpu/chunk.h).
// Internal linkage throughout.
#pragma once

#include "delta/cpu/chunk.h"
#include "gla/gla.h"

namespace lintf::gla {
namespace {

using cpu::kChunk;
using delta::load_state;
using delta::rows_of;
using delta::save_state;
using delta::state_of;
using delta::store;
using tile::Shape;
constexpr int64_t L = kChunk;

// Scratch of one head's passes, 64-byte aligned; its size is independent of N.
template <typename T>
struct Workspace {
  T *qbuf, *kbuf, *g, *prefix, *suffix, *scaled, *grad, *rows;  // L x cp
  T* cols;                                                       // cp x L
  T *vbuf, *vt, *gbuf, *dos, *out;                               // L x mp (vt: mp x L)
  T *a, *at, *da;                                                // L x L
  T *st, *state;                                                 // mp x cp, cp x mp
  T *decay, *carry, *running;                                    // cp
  const T *q = nullptr, *k = nullptr, *v = nullptr;
  int64_t rows_in_chunk = 0;

  explicit Workspace(const Dims& d) : buffer_(L * (9 * d.cp + 5 * d.mp + 3 * L) + 2 * d.mp * d.cp + 3 * d.cp) {
    T* next = buffer_.data();
    auto take = [&next](std::initializer_list<T**> slots, int64_t size) {
      for (T** slot : slots) *slot = next, next += size;  // sizes are multiples of 16 elements: aligned
    };
    take({&qbuf, &kbuf, &g, &prefix, &suffix, &scaled, &grad, &rows, &cols}, L * d.cp);
    take({&vbuf, &vt, &gbuf, &dos, &out}, L * d.mp);
    take({&a, &at, &da}, L * L);
    take({&st, &state}, d.mp * d.cp);
    take({&decay, &carry, &running}, d.cp);
  }

 private:
  cpu::AlignedBuffer<T> buffer_;
};

// The chunk's gates (padded rows and channels: 1, they decay nothing), their running products from
// the chunk's start (prefix, inclusive) and to its end (suffix, exclusive), and its packed q, k, v.
template <typename scalar_t, typename T>
void prepare(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t t0, bool v_transposed, Workspace<T>& w) {
  const int64_t rows = w.rows_in_chunk = std::min(L, d.n - t0);
  const T* gates = rows_of(a.gates, d, head, t0, d.c);
  for (int64_t t = 0; t < L; ++t) {
    T* row = w.g + t * d.cp;
    std::fill(row, row + d.cp, T(1));
    if (t < rows) std::copy(gates + t * d.c, gates + (t + 1) * d.c, row);
    for (int64_t c = 0; c < d.cp; ++c) w.prefix[t * d.cp + c] = row[c] * (t ? w.prefix[(t - 1) * d.cp + c] : T(1));
  }
  for (int64_t t = L - 1; t >= 0; --t) {
    for (int64_t c = 0; c < d.cp; ++c) {
      w.suffix[t * d.cp + c] = t + 1 < L ? w.suffix[(t + 1) * d.cp + c] * w.g[(t + 1) * d.cp + c] : T(1);
    }
  }
  w.q = cpu::pack(rows_of(a.q, d, head, t0, d.c), rows, d.c, d.cp, w.qbuf, static_cast<T*>(nullptr));
  w.k = cpu::pack(rows_of(a.k, d, head, t0, d.c), rows, d.c, d.cp, w.kbuf, static_cast<T*>(nullptr));
  w.v = cpu::pack(rows_of(a.v, d, head, t0, d.m), rows, d.m, d.mp, w.vbuf, v_transposed ? w.vt : nullptr);
}

// The chunk's scores A[t][s] = q_t . (k_s o D_ts) for s <= t (0 above) and, when grad is given, its
// dk part grad_s += sum_{t>=s} dA[t][s] (q_t o D_ts), with D_ts = prod_{s<u<=t} g_u.
template <typename T>
void scores(const Dims& d, const T* da, T* grad, Workspace<T>& w) {
  std::fill(w.a, w.a + L * L, T(0));
  for (int64_t s = 0; s < L; ++s) {
    std::fill(w.decay, w.decay + d.cp, T(1));
    std::fill(w.carry, w.carry + d.cp, T(0));
    const T* key = w.k + s * d.cp;
    for (int64_t t = s; t < L; ++t) {
      const T* query = w.q + t * d.cp;
      const T* gate = w.g + t * d.cp;
      const T weight = da == nullptr ? T(0) : da[t * L + s];
      T score = 0;
      for (int64_t c = 0; c < d.cp; ++c) {
        const T decayed = query[c] * (w.decay[c] *= t > s ? gate[c] : T(1));
        score += decayed * key[c];
        w.carry[c] += weight * decayed;
      }
      w.a[t * L + s] = score;
    }
    for (int64_t c = 0; grad != nullptr && c < d.cp; ++c) grad[s * d.cp + c] += w.carry[c];
  }
}

// grad_t += sum_{s<=t} dA[t][s] (k_s o D_ts): the in-chunk part of dq.
template <typename T>
void query_gradients(const Dims& d, const T* da, T* grad, Workspace<T>& w) {
  for (int64_t s = 0; s < L; ++s) {
    std::copy(w.k + s * d.cp, w.k + (s + 1) * d.cp, w.decay);  // k_s o D_ts
    for (int64_t t = s; t < L; ++t) {
      const T* gate = w.g + t * d.cp;
      const T weight = da[t * L + s];
      T* row = grad + t * d.cp;
      for (int64_t c = 0; c < d.cp; ++c) row[c] += weight * (w.decay[c] *= t > s ? gate[c] : T(1));
    }
  }
}

// out (L x ld) = x o y, element-wise.
template <typename T>
void multiply(const T* x, const T* y, int64_t ld, T* out) {
  for (int64_t i = 0; i < L * ld; ++i) out[i] = x[i] * y[i];
}

// state (cp x mp) = diag(prod of the chunk's gates) state + (K o suffix)^T V.
template <typename T>
void advance(const Dims& d, T* state, Workspace<T>& w) {
  const T* whole = w.prefix + (L - 1) * d.cp;
  for (int64_t c = 0; c < d.cp; ++c) delta::scale(state + c * d.mp, whole[c], d.mp);
  multiply(w.k, w.suffix, d.cp, w.scaled);
  cpu::transpose(w.scaled, L, d.cp, w.cols);
  tile::gemm<T>(d.cp, d.mp, L, w.cols, L, w.v, d.mp, state, d.mp, true);
}

// dA = dO V^T on and below the diagonal, with dO = scale * grad in w.dos (needs v transposed).
template <typename scalar_t, typename T>
void output_gradient(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t t0, Workspace<T>& w) {
  const T* g = cpu::pack(rows_of(a.grad, d, head, t0, d.m), w.rows_in_chunk, d.m, d.mp, w.gbuf,
                         static_cast<T*>(nullptr));
  for (int64_t i = 0; i < L * d.mp; ++i) w.dos[i] = a.scale * g[i];
  tile::gemm<T>(L, L, d.mp, w.dos, d.mp, w.vt, L, w.da, L, false, Shape::kLowerOut);
  for (int64_t t = 0; t < L; ++t) std::fill(w.da + t * L + t + 1, w.da + (t + 1) * L, T(0));
}

template <typename scalar_t, typename T>
void forward_chunk(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t t0, T* state, Workspace<T>& w) {
  prepare(d, a, head, t0, false, w);
  scores(d, static_cast<const T*>(nullptr), static_cast<T*>(nullptr), w);
  tile::gemm<T>(L, d.mp, L, w.a, L, w.v, d.mp, w.out, d.mp, false, Shape::kLowerA);
  multiply(w.q, w.prefix, d.cp, w.scaled);
  tile::gemm<T>(L, d.mp, d.cp, w.scaled, d.cp, state, d.mp, w.out, d.mp, true);
  advance(d, state, w);
  store(w.out, w.rows_in_chunk, d.m, d.mp, a.scale, rows_of(a.out, d, head, t0, d.m));
}

// dq = in-chunk part + prefix o (dO S_in^T); d_log_gate rows start as q o dq; then S advances.
template <typename scalar_t, typename T>
void dq_chunk(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t t0, T* state, Workspace<T>& w) {
  prepare(d, a, head, t0, true, w);
  output_gradient(d, a, head, t0, w);
  std::fill(w.grad, w.grad + L * d.cp, T(0));
  query_gradients(d, w.da, w.grad, w);
  cpu::transpose(state, d.cp, d.mp, w.st);
  tile::gemm<T>(L, d.cp, d.mp, w.dos, d.mp, w.st, d.cp, w.rows, d.cp, false);
  const int64_t rows = w.rows_in_chunk;
  T* gate_gradient = rows_of(a.d_log_gate, d, head, t0, d.c);
  for (int64_t t = 0; t < L; ++t) {
    for (int64_t c = 0; c < d.cp; ++c) {
      const int64_t i = t * d.cp + c;
      w.grad[i] += w.prefix[i] * w.rows[i];
      if (t < rows && c < d.c) gate_gradient[t * d.c + c] = w.q[i] * w.grad[i];
    }
  }
  advance(d, state, w);
  store(w.grad, rows, d.c, d.cp, T(1), rows_of(a.dq, d, head, t0, d.c));
}

// With R = dL/dS_out in w.state: dk = in-chunk part + suffix o (V R^T) rows, dv = A^T dO + (K o suffix) R,
// d_log_gate = reverse cumulative sum of its rows (q o dq) - k o dk, then R = diag(gates) R + (Q o prefix)^T dO.
template <typename scalar_t, typename T>
void dkdv_chunk(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t t0, Workspace<T>& w) {
  prepare(d, a, head, t0, true, w);
  output_gradient(d, a, head, t0, w);
  std::fill(w.grad, w.grad + L * d.cp, T(0));
  scores(d, w.da, w.grad, w);
  cpu::transpose(w.a, L, L, w.at);
  tile::gemm<T>(L, d.mp, L, w.at, L, w.dos, d.mp, w.out, d.mp, false, Shape::kUpperA);
  multiply(w.k, w.suffix, d.cp, w.scaled);
  tile::gemm<T>(L, d.mp, d.cp, w.scaled, d.cp, w.state, d.mp, w.out, d.mp, true);
  cpu::transpose(w.state, d.cp, d.mp, w.st);
  tile::gemm<T>(L, d.cp, d.mp, w.v, d.mp, w.st, d.cp, w.rows, d.cp, false);
  const int64_t rows = w.rows_in_chunk;
  T* gate_gradient = rows_of(a.d_log_gate, d, head, t0, d.c);
  for (int64_t t = L - 1; t >= 0; --t) {
    for (int64_t c = 0; c < d.cp; ++c) {
      const int64_t i = t * d.cp + c;
      w.grad[i] += w.suffix[i] * w.rows[i];
      if (t < rows && c < d.c) {
        w.running[c] += gate_gradient[t * d.c + c] - w.k[i] * w.grad[i];
        gate_gradient[t * d.c + c] = w.running[c];
      }
    }
  }
  const T* whole = w.prefix + (L - 1) * d.cp;
  for (int64_t c = 0; c < d.cp; ++c) delta::scale(w.state + c * d.mp, whole[c], d.mp);
  multiply(w.q, w.prefix, d.cp, w.scaled);
  cpu::transpose(w.scaled, L, d.cp, w.cols);
  tile::gemm<T>(d.cp, d.mp, L, w.cols, L, w.dos, d.mp, w.state, d.mp, true);
  store(w.grad, rows, d.c, d.cp, T(1), rows_of(a.dk, d, head, t0, d.c));
  store(w.out, rows, d.m, d.mp, T(1), rows_of(a.dv, d, head, t0, d.m));
}

template <typename scalar_t, typename T>
void forward_head(const Dims& d, const Args<scalar_t, T>& a, int64_t head) {
  Workspace<T> w(d);
  load_state(state_of(a.state0, d, head), d, w.state);
  for (int64_t t0 = 0; t0 < d.n; t0 += L) forward_chunk(d, a, head, t0, w.state, w);
  save_state(w.state, d, state_of(a.state_out, d, head));
}

// The forward sweep ends with S_N; the reverse sweep starts its carried d_log_gate at rowsum(S_N o dL/dS_N).
template <typename scalar_t, typename T>
void backward_head(const Dims& d, const Args<scalar_t, T>& a, int64_t head) {
  Workspace<T> w(d);
  load_state(state_of(a.state0, d, head), d, w.state);
  for (int64_t t0 = 0; t0 < d.n; t0 += L) dq_chunk(d, a, head, t0, w.state, w);
  const T* grad_state = state_of(a.grad_state, d, head);
  for (int64_t c = 0; c < d.cp; ++c) {
    w.running[c] = 0;
    for (int64_t m = 0; grad_state != nullptr && c < d.c && m < d.m; ++m) {
      w.running[c] += w.state[c * d.mp + m] * grad_state[c * d.m + m];
    }
  }
  load_state(grad_state, d, w.state);
  for (int64_t chunk = d.chunks - 1; chunk >= 0; --chunk) dkdv_chunk(d, a, head, chunk * L, w);
  save_state(w.state, d, state_of(a.state_out, d, head));
}

template <typename scalar_t, typename T>
constexpr cpu::HeadPasses<Args, scalar_t, T> kPasses{&forward_head<scalar_t, T>, &backward_head<scalar_t, T>};

}  // namespace
}  // namespace lintf::gla
