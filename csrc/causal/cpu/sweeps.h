// Per-head sweeps of the CPU causal product over a range of chunks: the functions of one
// VectorPath table (plan.h). Compiled once per vector path, inside its target
// region; internal linkage throughout.
//
// Forward, position by position with running state S_i = sum_{j<=i} k_j v_j^T, z_i = sum_{j<=i} k_j:
//   out_i = S_i^T q_i / (q_i . z_i + eps)   (tile::recurrence, a chunk of kChunk positions at a time).
// Backward (paper eq. 13-15, normaliser folded in as an all-ones value column whose gradient is
// gz): a forward sweep gives dq_i = S_i g_i + gz_i z_i from the prefix state (kept value-major, S^T,
// so that it is the recurrence's state), a reverse sweep gives dv_j = R_j^T k_j and
// dk_j = R_j v_j + r_j from the suffix state R_j = sum_{i>=j} q_i g_i^T (and its transpose, a
// second recurrence; in fp32 one update of R serves both, tile::merged_suffix_recurrence),
// r_j = sum_{i>=j} gz_i q_i. Both sweeps keep only O(C M) state, so memory
// beyond inputs, outputs and gradients does not grow with N. Where a sweep starts (the initial
// state, the final state's gradient, or the state a previous range of chunks left) is the
// scheduler's business (parallel.h); `totals` computes the states that connect
// ranges. When the forward kept its state at every span boundary (a.span_states), `spans` runs
// both backward sweeps span by span from those states instead of `dq` then `dkdv`.
#pragma once

#include "causal/cpu/chunk.h"

namespace lintf::sweep {
namespace {

using cpu::Args;
using cpu::Dims;
using cpu::kChunk;
using cpu::StateKind;
using cpu::Workspace;
using tile::Shape;

// Rows [t0, ...) of one head of a contiguous (heads, n, width) tensor.
template <typename P>
P* rows_of(P* base, const Dims& d, int64_t head, int64_t t0, int64_t width) {
  return base == nullptr ? nullptr : base + (head * d.n + t0) * width;
}

// Inputs a sweep step reads, as bits. kOut: the output, read with the normaliser only.
enum Reads : unsigned { kQ = 1, kK = 2, kV = 4, kGrad = 8, kOut = 16 };

// Queues rows [t0, t0 + kChunk) of head `head` (if inside the sequence) of the inputs in `reads`
// for prefetching while the current chunk computes (see common/cpu/prefetch.h).
template <typename scalar_t, typename T>
void prefetch_chunk(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t t0, unsigned reads,
                    tile::PrefetchQueue& ahead) {
  if (t0 >= 0 && t0 < d.n) {
    const int64_t rows = std::min(kChunk, d.n - t0), bytes = rows * static_cast<int64_t>(sizeof(scalar_t));
    if (reads & kQ) ahead.add(rows_of(a.q, d, head, t0, d.c), bytes * d.c);
    if (reads & kK) ahead.add(rows_of(a.k, d, head, t0, d.c), bytes * d.c);
    if (reads & kV) ahead.add(rows_of(a.v, d, head, t0, d.m), bytes * d.m);
    if (reads & kGrad) ahead.add(rows_of(a.grad, d, head, t0, d.m), bytes * d.m);
    if ((reads & kOut) && a.normalize) ahead.add(rows_of(a.out, d, head, t0, d.m), bytes * d.m);
  }
  ahead.start();
}

// Where a sweep's gz (see cpu::pack_grad) comes from: the output (kept in a.gz for a later sweep,
// or not), or a.gz, where the dq sweep kept it.
enum class Gz { kFromOutKept, kFromOut, kKept };

template <typename scalar_t, typename T>
const T* pack_grad(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t t0, Workspace<T>& w, Gz gz) {
  const int64_t rows = std::min(kChunk, d.n - t0);
  const scalar_t* out = gz == Gz::kKept ? nullptr : rows_of(a.out, d, head, t0, d.m);
  T* saved = gz == Gz::kFromOut ? nullptr : rows_of(a.gz, d, head, t0, 1);
  return cpu::pack_grad(rows_of(a.grad, d, head, t0, d.m), out, rows_of(a.den, d, head, t0, 1), saved, rows, d.m,
                        d.mp, w);
}

// A chunk's rows of a (heads, n, width) input as a kChunk x padded-width tile (see cpu::pack).
template <typename scalar_t, typename T>
const T* pack_rows(const scalar_t* input, const Dims& d, int64_t head, int64_t t0, int64_t width, int64_t padded,
                   T* buffer) {
  const int64_t rows = std::min(kChunk, d.n - t0);
  return cpu::pack(rows_of(input, d, head, t0, width), rows, width, padded, buffer, static_cast<T*>(nullptr));
}

// x[:n] += alpha * y[:n]
template <typename T>
inline void add_scaled(T* x, T alpha, const T* y, int64_t n) {
  for (int64_t c = 0; c < n; ++c) x[c] += alpha * y[c];
}

template <typename scalar_t, typename T>
void forward_chunk(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t t0, Workspace<T>& w, T* s) {
  const int64_t rows = std::min(kChunk, d.n - t0);
  const T* q = pack_rows(a.q, d, head, t0, d.c, d.cp, w.q);
  const T* k = pack_rows(a.k, d, head, t0, d.c, d.cp, w.k);
  const T* v = pack_rows(a.v, d, head, t0, d.m, d.mp, w.v);
  prefetch_chunk(d, a, head, t0 + a.prefetch_chunks * kChunk, kQ | kK | kV, w.ahead);
  T *z = s + d.cp * d.mp, *num = w.rows;
  tile::recurrence<T>(rows, false, q, k, d.cp, v, d.mp, s, num, &w.ahead);
  for (int64_t r = 0; r < rows; ++r) {
    T* row = num + r * d.mp;
    add_scaled<T>(z, T(1), k + r * d.cp, d.cp);  // z now includes position r, as the state does
    if (a.normalize) {
      const T den = a.eps + tile::dot<T>(q + r * d.cp, z, d.cp);
      a.den_out[head * d.n + t0 + r] = den;
      const T inv = T(1) / den;  // one division per row: a vector division per row costs ~8% of the forward
      for (int64_t c = 0; c < d.m; ++c) row[c] *= inv;
    }
    cpu::write_row(rows_of(a.result, d, head, t0 + r, d.m), row, d.m, a.stream_outputs);
  }
  w.ahead.drain();
}

// dq_i = sum_{j<=i} (g_i . v_j + gz_i) k_j = S_i^T g_i + gz_i z_i with the value-major prefix state.
// `ahead_t0`: the chunk whose rows to prefetch meanwhile (none when outside the sequence).
template <typename scalar_t, typename T>
void dq_chunk(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t t0, int64_t ahead_t0, Workspace<T>& w,
              T* st) {
  const int64_t rows = std::min(kChunk, d.n - t0);
  const T* g = pack_grad(d, a, head, t0, w, Gz::kFromOutKept);
  const T* k = pack_rows(a.k, d, head, t0, d.c, d.cp, w.k);
  const T* v = pack_rows(a.v, d, head, t0, d.m, d.mp, w.v);
  prefetch_chunk(d, a, head, ahead_t0, kK | kV | kGrad | kOut, w.ahead);
  T *z = st + d.cp * d.mp, *dq = w.rows;
  tile::recurrence<T>(rows, false, g, v, d.mp, k, d.cp, st, dq, &w.ahead);
  for (int64_t r = 0; r < rows; ++r) {
    T* row = dq + r * d.cp;
    add_scaled<T>(z, T(1), k + r * d.cp, d.cp);
    add_scaled<T>(row, w.gz[r], z, d.cp);
    cpu::write_row(rows_of(a.dq, d, head, t0 + r, d.c), row, d.c, a.stream_outputs);
  }
  w.ahead.drain();
}

// dk_j = sum_{i>=j} (v_j . g_i + gz_i) q_i = R_j v_j + r_j and
// dv_j = sum_{i>=j} (k_j . q_i) g_i = R_j^T k_j, with the suffix state R (and, unless tile::kMerged,
// its transpose in the workspace, kept in step) for later positions. Prefetches the rows of chunk
// `ahead_t0` in `reads`.
template <typename scalar_t, typename T>
void dkdv_chunk(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t t0, int64_t ahead_t0, unsigned reads,
                Workspace<T>& w, T* r_state) {
  const int64_t rows = std::min(kChunk, d.n - t0);
  const T* g = pack_grad(d, a, head, t0, w, a.gz == nullptr ? Gz::kFromOut : Gz::kKept);
  const T* q = pack_rows(a.q, d, head, t0, d.c, d.cp, w.q);
  const T* k = pack_rows(a.k, d, head, t0, d.c, d.cp, w.k);
  const T* v = pack_rows(a.v, d, head, t0, d.m, d.mp, w.v);
  prefetch_chunk(d, a, head, ahead_t0, reads, w.ahead);
  T *r_ones = r_state + d.cp * d.mp, *dv = w.rows, *dk = w.cols;
  if constexpr (tile::kMerged<T>) {
    tile::merged_suffix_recurrence(rows, q, k, d.cp, g, v, d.mp, r_state, dv, dk, w.partial, &w.ahead);
  } else {
    tile::recurrence<T>(rows, true, k, q, d.cp, g, d.mp, r_state, dv, &w.ahead);
    tile::recurrence<T>(rows, true, v, g, d.mp, q, d.cp, w.state_t, dk, &w.ahead);
  }
  for (int64_t r = rows - 1; r >= 0; --r) {
    T* row = dk + r * d.cp;
    add_scaled<T>(r_ones, w.gz[r], q + r * d.cp, d.cp);  // r_ones now includes position r
    add_scaled<T>(row, T(1), r_ones, d.cp);
    cpu::write_row(rows_of(a.dk, d, head, t0 + r, d.c), row, d.c, a.stream_outputs);
    cpu::write_row(rows_of(a.dv, d, head, t0 + r, d.m), dv + r * d.mp, d.m, a.stream_outputs);
  }
  w.ahead.drain();
}

// The forward also keeps the state entering every span of a.span_chunks chunks, when asked (a.span_states).
template <typename scalar_t, typename T>
void forward(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t first, int64_t last, T* state) {
  Workspace<T> w(d);
  for (int64_t chunk = first; chunk < last; ++chunk) {
    if (a.span_states != nullptr && chunk % a.span_chunks == 0) {
      T* kept = cpu::span_state(d, a, head, chunk / a.span_chunks);
      cpu::store_state(d, state, kept, kept + d.c * d.m);
    }
    forward_chunk(d, a, head, chunk * kChunk, w, state);
  }
  tile::fence();
}

template <typename scalar_t, typename T>
void dq(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t first, int64_t last, T* state) {
  Workspace<T> w(d);
  for (int64_t chunk = first; chunk < last; ++chunk) {
    dq_chunk(d, a, head, chunk * kChunk, (chunk + a.prefetch_chunks) * kChunk, w, state);
  }
  tile::fence();
}

template <typename scalar_t, typename T>
void dkdv(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t first, int64_t last, T* state) {
  Workspace<T> w(d);
  const unsigned reads = kQ | kK | kV | kGrad | (a.gz == nullptr ? kOut : 0);
  if constexpr (!tile::kMerged<T>) cpu::transpose(state, d.cp, d.mp, w.state_t);  // R^T, for dk
  for (int64_t chunk = last - 1; chunk >= first; --chunk) {
    dkdv_chunk(d, a, head, chunk * kChunk, (chunk - a.prefetch_chunks) * kChunk, reads, w, state);
  }
  tile::fence();
}

// The whole backward of chunks [first, last) (first a span boundary) from the forward's kept span
// states: span by span from the last, the dq sweep over the span from its kept start state, then
// the dk/dv sweep back over it, which finds the span's rows in L2 where the dq sweep left them.
// Meanwhile it prefetches the previous span's rows in the order that span's dq sweep reads them,
// so each input row comes from memory once (twice without kept states).
template <typename scalar_t, typename T>
void spans(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t first, int64_t last, T* state) {
  Workspace<T> w(d);
  cpu::AlignedBuffer<T> prefix(d.state_stride());
  const int64_t per = a.span_chunks;
  if constexpr (!tile::kMerged<T>) cpu::transpose(state, d.cp, d.mp, w.state_t);
  for (int64_t start = first + (last - 1 - first) / per * per; start >= first; start -= per) {
    const int64_t end = std::min(last, start + per);
    const T* kept = cpu::span_state(d, a, head, start / per);
    cpu::load_state(d, kept, kept + d.c * d.m, true, prefix.data());
    for (int64_t chunk = start; chunk < end; ++chunk) dq_chunk(d, a, head, chunk * kChunk, -1, w, prefix.data());
    for (int64_t chunk = end - 1; chunk >= start; --chunk) {
      const int64_t ahead = start - per + (end - 1 - chunk);  // the previous span, first chunk first
      dkdv_chunk(d, a, head, chunk * kChunk, ahead >= first ? ahead * kChunk : -1, kQ | kK | kV | kGrad | kOut, w,
                 state);
    }
  }
  tile::fence();
}

// What chunks [first, last) add to a running state of `kind`; the order of the chunks does not matter.
template <typename scalar_t, typename T>
void totals(const Dims& d, const Args<scalar_t, T>& a, StateKind kind, int64_t head, int64_t first, int64_t last,
            T* state) {
  Workspace<T> w(d);
  for (int64_t t0 = first * kChunk; t0 < std::min(d.n, last * kChunk); t0 += kChunk) {
    const int64_t rows = std::min(kChunk, d.n - t0);
    prefetch_chunk(d, a, head, t0 + a.prefetch_chunks * kChunk, kind == StateKind::kQueryGrad ? kQ | kGrad : kK | kV, w.ahead);
    if (kind == StateKind::kQueryGrad) {
      const T* q = cpu::pack(rows_of(a.q, d, head, t0, d.c), rows, d.c, d.cp, w.q, w.qt);
      const T* g = pack_grad(d, a, head, t0, w, Gz::kFromOut);
      cpu::add_to_state(d, q, w.qt, g, w.gz, state, &w.ahead);
      w.ahead.drain();
      continue;
    }
    const bool value_major = kind == StateKind::kValueKey;
    const T* k = cpu::pack(rows_of(a.k, d, head, t0, d.c), rows, d.c, d.cp, w.k, value_major ? nullptr : w.kt);
    const T* v = cpu::pack(rows_of(a.v, d, head, t0, d.m), rows, d.m, d.mp, w.v, value_major ? w.vt : nullptr);
    if (value_major) {
      cpu::add_to_value_major_state(d, w.vt, k, state, &w.ahead);
    } else {
      cpu::add_to_state(d, k, w.kt, v, static_cast<const T*>(nullptr), state, &w.ahead);
    }
    w.ahead.drain();
  }
}

template <typename scalar_t, typename T>
constexpr cpu::Sweeps<scalar_t, T> kSweeps{&totals<scalar_t, T>, &forward<scalar_t, T>, &dq<scalar_t, T>,
                                           &dkdv<scalar_t, T>, &spans<scalar_t, T>};

}  // namespace
}  // namespace lintf::sweep
