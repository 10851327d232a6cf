// Chunk sweeps of the CPU decayed causal product (see ../decayed_product.h for the semantics and
// the chunked form; passes.h runs them per head). Included once by each decayed_product_<path>.cpp
// inside its target region (vector_path.h); every product is a tile::gemm on packed, zero-padded
// kChunk-row tiles (common/cpu/pack.h). Internal linkage throughout.
//
// Backward without an (N, C, M) tensor: a forward sweep carries S^T and writes dq, p_t = q_t . dq_t
// and, per chunk, y = <Qd^T G, S_in> (Qd = diag(exp(b)) Q); a reverse sweep carries R = dL/dS_out
// and writes dk, dv and d log_decay. Treating the chunk's cumulative decays b as free variables,
// q_t enters only as exp(b_t) q_t, k_s as exp(-b_s) k_s and S_out carries exp(B), so
//   dL/db_t = q_t . dq_t - k_t . dk_t + [t last] <R, S_out>,
// and d log_decay is its reverse cumulative sum inside the chunk. x = <R, S_out> needs no state
// from the forward sweep: going back one chunk, x <- x - <R, (diag(exp(B - b)) K)^T V> + y.
#pragma once

#include "common/cpu/pack.h"
#include "common/cpu/tile.h"
#include "decayed/decayed_product.h"  // and <cmath>, included first, outside the target region

namespace lintf::decayed {
namespace {

using cpu::kChunk;
using tile::Shape;

// exp(x) for x <= 0, in a form compilers vectorise: 2^n exp(r) with n = round(x / ln 2),
// |r| <= ln(2) / 2 and exp(r) by its degree-7 Taylor polynomial (about 1 ulp); 0 below -87.
inline float exp_nonpositive(float x) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer held in the low bits
  constexpr int32_t kMagicBits = 0x4B400000;
  const float clamped = x < -87.0f ? -87.0f : x;
  const float shifted = clamped * 1.44269504f + kMagic;
  const float n = shifted - kMagic;
  const float r = clamped - n * 0.693359375f + n * 2.12194440e-4f;  // ln 2 in two parts
  const float tail = 1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720 + r * (1.0f / 5040)));
  const float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * tail)));
  int32_t bits;
  std::memcpy(&bits, &shifted, sizeof(bits));
  const int32_t exponent = (bits - kMagicBits + 127) << 23;
  float scale;
  std::memcpy(&scale, &exponent, sizeof(scale));
  return x < -87.0f ? 0.0f : p * scale;
}

inline double exp_nonpositive(double x) { return std::exp(x); }

template <typename T>
void exp_in_place(T* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = exp_nonpositive(x[i]);
}

// Scratch of one head's passes, 64-byte aligned; the size is independent of N.
template <typename T>
struct Workspace {
  T *q, *qt, *k, *kt, *v, *vt, *g, *gt;          // packed rows (kChunk x cp|mp) and transposes
  T *scaled, *left, *right, *extra;              // kChunk x max(cp, mp) (extra: cp x kChunk)
  T *decay, *decay_t, *square, *square2;         // kChunk x kChunk
  T *b, *to_start, *to_end;                      // kChunk: b, exp(b), exp(B - b)
  T *state, *suffix;                             // cp x mp: S (or S^T), R = dL/dS_out
  T whole = 1;                                   // exp(B)

  explicit Workspace(const Dims& d)
      : buffer_(kChunk * (4 * d.cp + 8 * std::max(d.cp, d.mp) + 4 * kChunk + 3) + 2 * d.cp * d.mp) {
    const int64_t wide = std::max(d.cp, d.mp);
    T** slots[] = {&q, &qt, &k, &kt, &v, &vt, &g, &gt, &scaled, &left, &right, &extra,
                   &decay, &decay_t, &square, &square2, &b, &to_start, &to_end, &state, &suffix};
    const int64_t widths[] = {d.cp, d.cp, d.cp, d.cp, wide, wide, wide, wide, wide, wide, wide, wide,
                              kChunk, kChunk, kChunk, kChunk, 1, 1, 1};
    T* next = buffer_.data();
    for (int i = 0; i < 19; ++i) {
      *slots[i] = next;
      next += kChunk * widths[i];  // kChunk elements of fp32 or fp64 are a multiple of 64 bytes
    }
    state = next, suffix = next + d.cp * d.mp;  // d.cp * d.mp is a multiple of 16 elements
  }

 private:
  cpu::AlignedBuffer<T> buffer_;
};

// b_t, exp(b_t), exp(B - b_t), exp(B) for one chunk of `rows` log-decays (padded rows decay
// nothing), and decay[t][s] = exp(b_t - b_s) for s <= t, 0 above the diagonal. b never increases,
// so every exponent is <= 0.
template <typename T>
void chunk_decays(const T* log_decay, int64_t rows, Workspace<T>& w) {
  T b = 0;
  for (int64_t t = 0; t < kChunk; ++t) {
    b += t < rows ? log_decay[t] : T(0);
    w.b[t] = b;
  }
  for (int64_t t = 0; t < kChunk; ++t) w.to_start[t] = w.b[t], w.to_end[t] = b - w.b[t];
  exp_in_place(w.to_start, kChunk);
  exp_in_place(w.to_end, kChunk);
  w.whole = exp_nonpositive(b);
  for (int64_t t = 0; t < kChunk; ++t) {
    T* row = w.decay + t * kChunk;
    for (int64_t s = 0; s <= t; ++s) row[s] = w.b[t] - w.b[s];
    exp_in_place(row, t + 1);
    std::fill(row + t + 1, row + kChunk, T(0));
  }
}

// tile (kChunk x kChunk) o= decay on the kept side (lower: s <= t, else s >= t; decay holds D or
// D^T), zero on the other, whatever a triangular gemm left there.
template <typename T>
void apply_decay(T* tile, const T* decay, bool lower) {
  for (int64_t t = 0; t < kChunk; ++t) {
    T* row = tile + t * kChunk;
    const T* factors = decay + t * kChunk;
    const int64_t begin = lower ? 0 : t, end = lower ? t + 1 : kChunk;
    std::fill(row, row + begin, T(0));
    for (int64_t s = begin; s < end; ++s) row[s] *= factors[s];
    std::fill(row + end, row + kChunk, T(0));
  }
}

// out (kChunk x ld) = diag(w) x.
template <typename T>
void scale_rows(const T* x, const T* w, int64_t ld, T* out) {
  for (int64_t r = 0; r < kChunk; ++r) {
    for (int64_t c = 0; c < ld; ++c) out[r * ld + c] = w[r] * x[r * ld + c];
  }
}

// xt (ld x kChunk) = xt diag(w), in place.
template <typename T>
void scale_columns(T* xt, const T* w, int64_t ld) {
  for (int64_t c = 0; c < ld; ++c) {
    for (int64_t r = 0; r < kChunk; ++r) xt[c * kChunk + r] *= w[r];
  }
}

template <typename T>
void scale(T* x, T factor, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= factor;
}

// Rows [t0, ...) of one head of a contiguous (heads, n, width) tensor.
template <typename P>
P* rows_of(P* base, const Dims& d, int64_t head, int64_t t0, int64_t width) {
  return base == nullptr ? nullptr : base + (head * d.n + t0) * width;
}

template <typename P>
P* state_of(P* base, const Dims& d, int64_t head) {
  return base == nullptr ? nullptr : base + head * d.c * d.m;
}

// dst (rows x cols, contiguous) = the first rows and cols of a tile with leading dimension ld. With
// `streamed`, fp32/fp64 rows that start on a vector boundary bypass the caches (tile::stream; the
// pass calls tile::fence() before returning): a gradient larger than the caches is read by nobody
// before it leaves them, so fetching its lines first, as plain stores do, only costs bandwidth.
template <typename scalar_t, typename T>
void store(const T* src, int64_t rows, int64_t cols, int64_t ld, scalar_t* dst, bool streamed = false) {
  for (int64_t r = 0; r < rows; ++r) {
    scalar_t* out = dst + r * cols;
    const T* row = src + r * ld;
    if constexpr (std::is_same_v<scalar_t, T>) {
      if (streamed && cols % tile::kWidth<T> == 0 && reinterpret_cast<std::uintptr_t>(out) % tile::kVectorBytes == 0) {
        for (int64_t c = 0; c < cols; c += tile::kWidth<T>) tile::stream<T>(out + c, tile::load<T>(row + c));
        continue;
      }
    }
    for (int64_t c = 0; c < cols; ++c) out[c] = static_cast<scalar_t>(row[c]);
  }
}

// The padded state (cp x mp, or its mp x cp transpose) from a (c x m) one; zeros for null.
template <typename T>
void load_state(const T* src, const Dims& d, bool transposed, T* state) {
  std::fill(state, state + d.cp * d.mp, T(0));
  for (int64_t i = 0; src != nullptr && i < d.c; ++i) {
    for (int64_t j = 0; j < d.m; ++j) (transposed ? state[j * d.cp + i] : state[i * d.mp + j]) = src[i * d.m + j];
  }
}

// out = ((Q K^T) o D) V + diag(exp(b)) Q S, then S = exp(B) S + (diag(exp(B - b)) K)^T V.
template <typename scalar_t, typename T>
void forward_chunk(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t t0, Workspace<T>& w) {
  const int64_t rows = std::min(kChunk, d.n - t0);
  chunk_decays(rows_of(a.log_decay, d, head, t0, 1), rows, w);
  const T* q = cpu::pack(rows_of(a.q, d, head, t0, d.c), rows, d.c, d.cp, w.q, static_cast<T*>(nullptr));
  cpu::pack(rows_of(a.k, d, head, t0, d.c), rows, d.c, d.cp, w.k, w.kt);
  const T* v = cpu::pack(rows_of(a.v, d, head, t0, d.m), rows, d.m, d.mp, w.v, static_cast<T*>(nullptr));
  tile::gemm<T>(kChunk, kChunk, d.cp, q, d.cp, w.kt, kChunk, w.square, kChunk, false, Shape::kLowerOut);
  apply_decay(w.square, w.decay, true);
  tile::gemm<T>(kChunk, d.mp, kChunk, w.square, kChunk, v, d.mp, w.left, d.mp, false, Shape::kLowerA);
  scale_rows(q, w.to_start, d.cp, w.scaled);
  tile::gemm<T>(kChunk, d.mp, d.cp, w.scaled, d.cp, w.state, d.mp, w.left, d.mp, true);
  scale_columns(w.kt, w.to_end, d.cp);
  scale(w.state, w.whole, d.cp * d.mp);
  tile::gemm<T>(d.cp, d.mp, kChunk, w.kt, kChunk, v, d.mp, w.state, d.mp, true);
  store(w.left, rows, d.m, d.mp, rows_of(a.out, d, head, t0, d.m));
}

// dq = ((G V^T) o D) K + diag(exp(b)) G S^T with S^T (mp x cp) in w.state, then
// S^T = exp(B) S^T + V^T diag(exp(B - b)) K. Writes p_t = q_t . dq_t to d_log_decay; returns y.
template <typename scalar_t, typename T>
T dq_chunk(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t t0, Workspace<T>& w) {
  const int64_t rows = std::min(kChunk, d.n - t0);
  chunk_decays(rows_of(a.log_decay, d, head, t0, 1), rows, w);
  const T* q = cpu::pack(rows_of(a.q, d, head, t0, d.c), rows, d.c, d.cp, w.q, static_cast<T*>(nullptr));
  const T* k = cpu::pack(rows_of(a.k, d, head, t0, d.c), rows, d.c, d.cp, w.k, static_cast<T*>(nullptr));
  cpu::pack(rows_of(a.v, d, head, t0, d.m), rows, d.m, d.mp, w.v, w.vt);
  const T* g = cpu::pack(rows_of(a.grad, d, head, t0, d.m), rows, d.m, d.mp, w.g, static_cast<T*>(nullptr));
  tile::gemm<T>(kChunk, kChunk, d.mp, g, d.mp, w.vt, kChunk, w.square, kChunk, false, Shape::kLowerOut);
  apply_decay(w.square, w.decay, true);
  tile::gemm<T>(kChunk, d.cp, kChunk, w.square, kChunk, k, d.cp, w.left, d.cp, false, Shape::kLowerA);
  tile::gemm<T>(kChunk, d.cp, d.mp, g, d.mp, w.state, d.cp, w.right, d.cp, false);  // rows S g_t
  T y = 0;
  T* p = rows_of(a.d_log_decay, d, head, t0, 1);
  for (int64_t t = 0; t < rows; ++t) {
    T* dq = w.left + t * d.cp;
    const T* earlier = w.right + t * d.cp;
    for (int64_t c = 0; c < d.cp; ++c) dq[c] += w.to_start[t] * earlier[c];
    y += w.to_start[t] * tile::dot<T>(q + t * d.cp, earlier, d.cp);
    p[t] = tile::dot<T>(q + t * d.cp, dq, d.cp);
  }
  scale_rows(k, w.to_end, d.cp, w.scaled);
  scale(w.state, w.whole, d.cp * d.mp);
  tile::gemm<T>(d.mp, d.cp, kChunk, w.vt, kChunk, w.scaled, d.cp, w.state, d.cp, true);
  store(w.left, rows, d.c, d.cp, rows_of(a.dq, d, head, t0, d.c), a.stream_gradients);
  return y;
}

// With R = dL/dS_out (cp x mp) in w.suffix and x = <R, S_out>:
//   dk = ((V G^T) o D^T) Q + diag(exp(B - b)) V R^T,  dv = ((K Q^T) o D^T) G + diag(exp(B - b)) K R,
//   d log_decay from p (dq_chunk) and dk, then R = exp(B) R + (diag(exp(b)) Q)^T G.
// Returns z = <R, (diag(exp(B - b)) K)^T V> for the R this chunk received.
template <typename scalar_t, typename T>
T dkdv_chunk(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t t0, T x, Workspace<T>& w) {
  const int64_t rows = std::min(kChunk, d.n - t0);
  chunk_decays(rows_of(a.log_decay, d, head, t0, 1), rows, w);
  cpu::transpose(w.decay, kChunk, w.decay_t);
  const T* q = cpu::pack(rows_of(a.q, d, head, t0, d.c), rows, d.c, d.cp, w.q, w.qt);
  const T* k = cpu::pack(rows_of(a.k, d, head, t0, d.c), rows, d.c, d.cp, w.k, static_cast<T*>(nullptr));
  const T* v = cpu::pack(rows_of(a.v, d, head, t0, d.m), rows, d.m, d.mp, w.v, w.vt);
  const T* g = cpu::pack(rows_of(a.grad, d, head, t0, d.m), rows, d.m, d.mp, w.g, w.gt);
  tile::gemm<T>(kChunk, kChunk, d.cp, k, d.cp, w.qt, kChunk, w.square, kChunk, false, Shape::kUpperOut);
  apply_decay(w.square, w.decay_t, false);
  tile::gemm<T>(kChunk, kChunk, d.mp, v, d.mp, w.gt, kChunk, w.square2, kChunk, false, Shape::kUpperOut);
  apply_decay(w.square2, w.decay_t, false);
  tile::gemm<T>(kChunk, d.cp, kChunk, w.square2, kChunk, q, d.cp, w.left, d.cp, false, Shape::kUpperA);
  tile::gemm<T>(kChunk, d.mp, kChunk, w.square, kChunk, g, d.mp, w.right, d.mp, false, Shape::kUpperA);
  scale_rows(k, w.to_end, d.cp, w.scaled);
  tile::gemm<T>(kChunk, d.mp, d.cp, w.scaled, d.cp, w.suffix, d.mp, w.right, d.mp, true);
  tile::gemm<T>(d.cp, kChunk, d.mp, w.suffix, d.mp, w.vt, kChunk, w.extra, kChunk, false);  // columns R v_s
  T z = 0;
  cpu::transpose(w.extra, d.cp, kChunk, w.scaled);  // rows R v_s, one per position
  for (int64_t s = 0; s < kChunk; ++s) {
    T* dk = w.left + s * d.cp;
    const T* later = w.scaled + s * d.cp;
    for (int64_t c = 0; c < d.cp; ++c) dk[c] += w.to_end[s] * later[c];
    z += w.to_end[s] * tile::dot<T>(k + s * d.cp, later, d.cp);
  }
  T* gradient = rows_of(a.d_log_decay, d, head, t0, 1);
  for (int64_t t = rows - 1; t >= 0; --t) {
    x += gradient[t] - tile::dot<T>(k + t * d.cp, w.left + t * d.cp, d.cp);
    gradient[t] = x;
  }
  scale_columns(w.qt, w.to_start, d.cp);
  scale(w.suffix, w.whole, d.cp * d.mp);
  tile::gemm<T>(d.cp, d.mp, kChunk, w.qt, kChunk, g, d.mp, w.suffix, d.mp, true);
  store(w.left, rows, d.c, d.cp, rows_of(a.dk, d, head, t0, d.c), a.stream_gradients);
  store(w.right, rows, d.m, d.mp, rows_of(a.dv, d, head, t0, d.m), a.stream_gradients);
  return z;
}

}  // namespace
}  // namespace lintf::decayed
