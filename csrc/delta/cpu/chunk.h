// One chunk of the CPU delta rule (semantics and chunked form in ../delta_rule.h): its workspace and
// the steps the forward and the backward share. Included by sweeps.h inside the vector path's target
// region; every product is a tile::gemm on packed, zero-padded kChunk-row tiles (common/cpu/pack.h).
// Internal linkage throughout.
#pragma once

#include "common/cpu/pack.h"
#include "common/cpu/tile.h"
#include "delta/cpu/kept.h"
#include "delta/delta_rule.h"

#include <cmath>

namespace lintf::delta {
namespace {

using cpu::kChunk;
using tile::Shape;
constexpr int64_t L = kChunk;

// Scratch of one head's passes, 64-byte aligned; its size is independent of N. dos and dx are
// adjacent, as are their (2L x cp) products with S_in^T in rows, so one product serves both.
template <typename T>
struct Workspace {
  T *qbuf, *kbuf, *scaled, *dq, *dk;                 // L x cp
  T* rows;                                           // 2L x cp
  T *qt, *kt;                                        // cp x L
  T* cols;                                           // cp x 2L
  T *vbuf, *gbuf, *dos, *dx, *x, *r, *u, *du;        // L x mp
  T* ut;                                             // mp x L
  T *decay, *h, *tinv, *p, *pt, *dp, *dpt, *da, *dat, *z, *tinvt;  // L x L
  T* dost;                                           // mp x 2L
  T *b, *e, *f, *beta, *de, *df;                     // L
  const T *q = nullptr, *k = nullptr, *v = nullptr;  // the chunk's tiles (packed, or the inputs themselves)
  T whole = 1;                                       // exp(b_L)
  int64_t rows_in_chunk = 0;

  explicit Workspace(const Dims& d) : buffer_(L * (11 * d.cp + 11 * d.mp + 11 * L + 6)) {
    T* next = buffer_.data();
    auto take = [&next](std::initializer_list<T**> slots, int64_t size) {
      for (T** slot : slots) *slot = next, next += size;  // sizes are multiples of 16 elements: aligned
    };
    take({&qbuf, &kbuf, &scaled, &dq, &dk, &qt, &kt}, L * d.cp);
    take({&rows, &cols}, 2 * L * d.cp);
    take({&vbuf, &gbuf, &dos, &dx, &x, &r, &u, &du, &ut}, L * d.mp);
    take({&decay, &h, &tinv, &p, &pt, &dp, &dpt, &da, &dat, &z, &tinvt}, L * L);
    take({&dost}, 2 * L * d.mp);
    take({&b, &e, &f, &beta, &de, &df}, L);
  }

 private:
  cpu::AlignedBuffer<T> buffer_;
};

// Rows [t0, ...) of one head of a contiguous (heads, n, width) tensor; null stays null.
template <typename P>
P* rows_of(P* base, const Dims& d, int64_t head, int64_t t0, int64_t width) {
  return base == nullptr ? nullptr : base + (head * d.n + t0) * width;
}

template <typename P>
P* state_of(P* base, const Dims& d, int64_t head) {
  return base == nullptr ? nullptr : base + head * d.c * d.m;
}

// The padded (cp x mp) state from a (c x m) one; zeros for null.
template <typename T>
void load_state(const T* src, const Dims& d, T* state) {
  std::fill(state, state + d.cp * d.mp, T(0));
  for (int64_t i = 0; src != nullptr && i < d.c; ++i) std::copy(src + i * d.m, src + (i + 1) * d.m, state + i * d.mp);
}

template <typename T>
void save_state(const T* state, const Dims& d, T* dst) {
  for (int64_t i = 0; i < d.c; ++i) std::copy(state + i * d.mp, state + i * d.mp + d.m, dst + i * d.m);
}

// dst (rows x cols, contiguous) = factor * the first rows and cols of a tile with leading dimension ld.
template <typename scalar_t, typename T>
void store(const T* tile, int64_t rows, int64_t cols, int64_t ld, T factor, scalar_t* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = static_cast<scalar_t>(factor * tile[r * ld + c]);
  }
}

template <typename T>
void scale(T* x, T factor, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= factor;
}

// out (L x ld) = diag(w) x.
template <typename T>
void scale_rows(const T* x, const T* w, int64_t ld, T* out) {
  for (int64_t r = 0; r < L; ++r) {
    for (int64_t c = 0; c < ld; ++c) out[r * ld + c] = w[r] * x[r * ld + c];
  }
}

// out (ld x L) = factor * xt diag(w).
template <typename T>
void scale_columns(const T* xt, const T* w, int64_t ld, T factor, T* out) {
  for (int64_t c = 0; c < ld; ++c) {
    for (int64_t s = 0; s < L; ++s) out[c * L + s] = factor * w[s] * xt[c * L + s];
  }
}

// b_t, exp(b_t), exp(b_L - b_t), exp(b_L) and decay[t][s] = exp(b_t - b_s) for s <= t (0 above) for a
// chunk of `rows` log-decays (null: no decay, every factor exactly 1; padded rows decay nothing).
// Every exponent is <= 0.
template <typename T>
void chunk_decays(const T* log_decay, int64_t rows, Workspace<T>& w) {
  if (log_decay == nullptr) {
    std::fill(w.b, w.b + L, T(0)), std::fill(w.e, w.e + L, T(1)), std::fill(w.f, w.f + L, T(1));
    w.whole = 1;
    for (int64_t t = 0; t < L; ++t) {
      std::fill(w.decay + t * L, w.decay + t * L + t + 1, T(1));
      std::fill(w.decay + t * L + t + 1, w.decay + (t + 1) * L, T(0));
    }
    return;
  }
  T b = 0;
  for (int64_t t = 0; t < L; ++t) {
    b += t < rows ? log_decay[t] : T(0);
    w.b[t] = b;
  }
  for (int64_t t = 0; t < L; ++t) w.e[t] = std::exp(w.b[t]), w.f[t] = std::exp(b - w.b[t]);
  w.whole = std::exp(b);
  for (int64_t t = 0; t < L; ++t) {
    T* row = w.decay + t * L;
    for (int64_t s = 0; s <= t; ++s) row[s] = std::exp(w.b[t] - w.b[s]);
    std::fill(row + t + 1, row + L, T(0));
  }
}

// The chunk's decays, beta and K (and K^T); `rows_in_chunk` its positions.
template <typename scalar_t, typename T>
void chunk_inputs(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t t0, Workspace<T>& w) {
  const int64_t rows = w.rows_in_chunk = std::min(L, d.n - t0);
  chunk_decays(rows_of(a.log_decay, d, head, t0, 1), rows, w);
  const T* beta = rows_of(a.beta, d, head, t0, 1);
  for (int64_t t = 0; t < L; ++t) w.beta[t] = t < rows ? beta[t] : T(0);  // padded rows write nothing
  w.k = cpu::pack(rows_of(a.k, d, head, t0, d.c), rows, d.c, d.cp, w.kbuf, w.kt);
}

// chunk_inputs, then h = (K K^T) o G strictly below the diagonal (0 elsewhere) and tinv = (I + A)^{-1}
// with A = diag(beta) h, by forward substitution (row t of tinv is nonzero up to t), into w.h, w.tinv.
template <typename scalar_t, typename T>
void prepare(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t t0, Workspace<T>& w) {
  chunk_inputs(d, a, head, t0, w);
  tile::gemm<T>(L, L, d.cp, w.k, d.cp, w.kt, L, w.h, L, false, Shape::kLowerOut);
  for (int64_t t = 0; t < L; ++t) {
    T* row = w.h + t * L;
    for (int64_t s = 0; s < t; ++s) row[s] *= w.decay[t * L + s];
    std::fill(row + t, row + L, T(0));
    T* inverse = w.tinv + t * L;
    std::fill(inverse, inverse + L, T(0));
    inverse[t] = 1;
    for (int64_t s = 0; s < t; ++s) {
      const T coefficient = -w.beta[t] * row[s];
      const T* earlier = w.tinv + s * L;
      for (int64_t j = 0; j <= s; ++j) inverse[j] += coefficient * earlier[j];
    }
  }
}

// r = diag(beta) x and the updates u = tinv r (after prepare).
template <typename T>
void solve_updates(const Dims& d, const T* x, Workspace<T>& w) {
  for (int64_t t = 0; t < L; ++t) {
    for (int64_t c = 0; c < d.mp; ++c) w.r[t * d.mp + c] = w.beta[t] * x[t * d.mp + c];
  }
  tile::gemm<T>(L, d.mp, L, w.tinv, L, w.r, d.mp, w.u, d.mp, false, Shape::kLowerA);
}

// x = V - diag(exp(b)) K S_in, then solve_updates (after prepare).
template <typename scalar_t, typename T>
void updates(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t t0, const T* state, Workspace<T>& w) {
  w.v = cpu::pack(rows_of(a.v, d, head, t0, d.m), w.rows_in_chunk, d.m, d.mp, w.vbuf, static_cast<T*>(nullptr));
  tile::gemm<T>(L, d.mp, d.cp, w.k, d.cp, state, d.mp, w.x, d.mp, false);
  for (int64_t t = 0; t < L; ++t) {
    for (int64_t c = 0; c < d.mp; ++c) w.x[t * d.mp + c] = w.v[t * d.mp + c] - w.e[t] * w.x[t * d.mp + c];
  }
  solve_updates(d, w.x, w);
}

// next = exp(b_L) state + (diag(exp(b_L - b)) K)^T u (after updates; next may be state itself).
template <typename T>
void advance(const Dims& d, const T* state, T* next, Workspace<T>& w) {
  for (int64_t i = 0; i < d.cp * d.mp; ++i) next[i] = w.whole * state[i];
  scale_columns(w.kt, w.f, d.cp, T(1), w.cols);
  tile::gemm<T>(d.cp, d.mp, L, w.cols, L, w.u, d.mp, next, d.mp, true);
}

// tile (L x L) o= decay on and below the diagonal, 0 above.
template <typename T>
void apply_decay(T* tile, const T* decay) {
  for (int64_t t = 0; t < L; ++t) {
    for (int64_t s = 0; s <= t; ++s) tile[t * L + s] *= decay[t * L + s];
    std::fill(tile + t * L + t + 1, tile + (t + 1) * L, T(0));
  }
}

}  // namespace
}  // namespace lintf::delta
