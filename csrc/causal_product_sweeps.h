// Per-head sweeps of the CPU causal product over a range of chunks: the functions of one
// VectorPath table (causal_product_cpu_plan.h). Compiled once per vector path, inside its target
// region; internal linkage throughout.
//
// Forward, per chunk of kChunk positions with running state S = sum_j k_j v_j^T, z = sum_j k_j:
//   out = tril(Q K^T) V + Q S,  den = rowsum(tril(Q K^T)) + Q z + eps,  then S += K^T V, z += K^T 1.
// Backward (paper eq. 13-15, normaliser folded in as an all-ones value column whose gradient is
// gz): a forward sweep gives dq from the prefix state S (kept value-major, S^T, so G S^T needs no
// transpose), a reverse sweep gives dk and dv from the suffix state R = sum_i q_i g_i^T,
// r = sum_i q_i gz_i. Both sweeps keep only O(C M) state, so memory beyond inputs, outputs and
// gradients does not grow with N. Where a sweep starts (the initial state, the final state's
// gradient, or the state a previous range of chunks left) is the scheduler's business
// (causal_product_cpu_parallel.h); `totals` computes the states that connect ranges.
#pragma once

#include "causal_product_cpu.h"

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

// Inputs a sweep step reads, as bits. kGrad: the output gradient and, with the normaliser, the output.
enum Reads : unsigned { kQ = 1, kK = 2, kV = 4, kGrad = 8 };

// Queues rows [t0, t0 + kChunk) of head `head` (if inside the sequence) of the inputs in `reads`
// for prefetching while the current chunk computes (see causal_product_prefetch.h).
template <typename scalar_t, typename T>
void prefetch_chunk(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t t0, unsigned reads,
                    tile::PrefetchQueue& ahead) {
  if (t0 >= 0 && t0 < d.n) {
    const int64_t rows = std::min(kChunk, d.n - t0), bytes = rows * static_cast<int64_t>(sizeof(scalar_t));
    if (reads & kQ) ahead.add(rows_of(a.q, d, head, t0, d.c), bytes * d.c);
    if (reads & kK) ahead.add(rows_of(a.k, d, head, t0, d.c), bytes * d.c);
    if (reads & kV) ahead.add(rows_of(a.v, d, head, t0, d.m), bytes * d.m);
    if (reads & kGrad) {
      ahead.add(rows_of(a.grad, d, head, t0, d.m), bytes * d.m);
      if (a.normalize) ahead.add(rows_of(a.out, d, head, t0, d.m), bytes * d.m);
    }
  }
  ahead.start();
}

template <typename scalar_t, typename T>
const T* pack_grad(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t t0, Workspace<T>& w,
                   bool transposed) {
  const int64_t rows = std::min(kChunk, d.n - t0);
  return cpu::pack_grad(rows_of(a.grad, d, head, t0, d.m), rows_of(a.out, d, head, t0, d.m), rows_of(a.den, d, head, t0, 1),
                 rows, d.m, d.mp, w, transposed);
}

template <typename scalar_t, typename T>
void forward_chunk(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t t0, Workspace<T>& w, T* s) {
  const int64_t rows = std::min(kChunk, d.n - t0);
  const T* q = cpu::pack(rows_of(a.q, d, head, t0, d.c), rows, d.c, d.cp, w.q, static_cast<T*>(nullptr));
  const T* k = cpu::pack(rows_of(a.k, d, head, t0, d.c), rows, d.c, d.cp, w.k, w.kt);
  const T* v = cpu::pack(rows_of(a.v, d, head, t0, d.m), rows, d.m, d.mp, w.v, static_cast<T*>(nullptr));
  prefetch_chunk(d, a, head, t0 + 2 * kChunk, kQ | kK | kV, w.ahead);
  T *z = s + d.cp * d.mp, *num = w.rows;
  tile::gemm<T>(kChunk, kChunk, d.cp, q, d.cp, w.kt, kChunk, w.square, kChunk, false, Shape::kLowerOut, &w.ahead);
  cpu::mask<T>(w.square, true, nullptr, nullptr, a.normalize ? w.den : nullptr);
  tile::gemm<T>(kChunk, d.mp, kChunk, w.square, kChunk, v, d.mp, num, d.mp, false, Shape::kLowerA, &w.ahead);
  tile::gemm<T>(kChunk, d.mp, d.cp, q, d.cp, s, d.mp, num, d.mp, true, Shape::kFull, &w.ahead);
  for (int64_t r = 0; r < rows; ++r) {
    T* row = num + r * d.mp;
    if (a.normalize) {
      const T den = w.den[r] + a.eps + tile::dot<T>(q + r * d.cp, z, d.cp);
      a.den_out[head * d.n + t0 + r] = den;
      for (int64_t c = 0; c < d.m; ++c) row[c] /= den;
    }
    cpu::write_row(rows_of(a.result, d, head, t0 + r, d.m), row, d.m, a.stream_outputs);
  }
  cpu::add_to_state(d, k, w.kt, v, static_cast<const T*>(nullptr), s, &w.ahead);
  w.ahead.drain();
}

// dq_i = sum_{j<=i} (g_i . v_j + gz_i) k_j, with the value-major prefix state for earlier chunks.
template <typename scalar_t, typename T>
void dq_chunk(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t t0, Workspace<T>& w, T* st) {
  const int64_t rows = std::min(kChunk, d.n - t0);
  const T* g = pack_grad(d, a, head, t0, w, false);
  const T* k = cpu::pack(rows_of(a.k, d, head, t0, d.c), rows, d.c, d.cp, w.k, static_cast<T*>(nullptr));
  cpu::pack(rows_of(a.v, d, head, t0, d.m), rows, d.m, d.mp, w.v, w.vt);
  prefetch_chunk(d, a, head, t0 + 2 * kChunk, kK | kV | kGrad, w.ahead);
  T *z = st + d.cp * d.mp, *dq = w.rows;
  tile::gemm<T>(kChunk, kChunk, d.mp, g, d.mp, w.vt, kChunk, w.square, kChunk, false, Shape::kLowerOut, &w.ahead);
  cpu::mask<T>(w.square, true, w.gz, nullptr, nullptr);
  tile::gemm<T>(kChunk, d.cp, kChunk, w.square, kChunk, k, d.cp, dq, d.cp, false, Shape::kLowerA, &w.ahead);
  tile::gemm<T>(kChunk, d.cp, d.mp, g, d.mp, st, d.cp, dq, d.cp, true, Shape::kFull, &w.ahead);
  for (int64_t r = 0; r < rows; ++r) {
    T* row = dq + r * d.cp;
    for (int64_t c = 0; c < d.c; ++c) row[c] += w.gz[r] * z[c];
    cpu::write_row(rows_of(a.dq, d, head, t0 + r, d.c), row, d.c, a.stream_outputs);
  }
  cpu::add_to_value_major_state(d, w.vt, k, st, &w.ahead);
  w.ahead.drain();
}

// dk_j = sum_{i>=j} (v_j . g_i + gz_i) q_i and dv_j = sum_{i>=j} (k_j . q_i) g_i, with the
// suffix state for later chunks.
template <typename scalar_t, typename T>
void dkdv_chunk(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t t0, Workspace<T>& w, T* r_state) {
  const int64_t rows = std::min(kChunk, d.n - t0);
  const T* g = pack_grad(d, a, head, t0, w, true);
  const T* q = cpu::pack(rows_of(a.q, d, head, t0, d.c), rows, d.c, d.cp, w.q, w.qt);
  const T* k = cpu::pack(rows_of(a.k, d, head, t0, d.c), rows, d.c, d.cp, w.k, static_cast<T*>(nullptr));
  const T* v = cpu::pack(rows_of(a.v, d, head, t0, d.m), rows, d.m, d.mp, w.v, w.vt);
  prefetch_chunk(d, a, head, t0 - 2 * kChunk, kQ | kK | kV | kGrad, w.ahead);
  T *r_ones = r_state + d.cp * d.mp, *sq = w.square;
  tile::gemm<T>(kChunk, kChunk, d.mp, v, d.mp, w.gt, kChunk, sq, kChunk, false, Shape::kUpperOut, &w.ahead);
  cpu::mask<T>(sq, false, nullptr, w.gz, nullptr);
  tile::gemm<T>(kChunk, d.cp, kChunk, sq, kChunk, q, d.cp, w.rows, d.cp, false, Shape::kUpperA, &w.ahead);
  // (R V^T): cp x kChunk
  tile::gemm<T>(d.cp, kChunk, d.mp, r_state, d.mp, w.vt, kChunk, w.cols, kChunk, false, Shape::kFull, &w.ahead);
  cpu::transpose(w.cols, d.cp, kChunk, w.kt);  // V R^T: kChunk x cp (kt is free in this sweep)
  for (int64_t r = 0; r < rows; ++r) {
    T* row = w.rows + r * d.cp;
    const T* inter = w.kt + r * d.cp;
    for (int64_t c = 0; c < d.c; ++c) row[c] = row[c] + inter[c] + r_ones[c];
    cpu::write_row(rows_of(a.dk, d, head, t0 + r, d.c), row, d.c, a.stream_outputs);
  }
  tile::gemm<T>(kChunk, kChunk, d.cp, k, d.cp, w.qt, kChunk, sq, kChunk, false, Shape::kUpperOut, &w.ahead);
  cpu::mask<T>(sq, false, nullptr, nullptr, nullptr);
  tile::gemm<T>(kChunk, d.mp, kChunk, sq, kChunk, g, d.mp, w.rows, d.mp, false, Shape::kUpperA, &w.ahead);
  tile::gemm<T>(kChunk, d.mp, d.cp, k, d.cp, r_state, d.mp, w.rows, d.mp, true, Shape::kFull, &w.ahead);
  for (int64_t r = 0; r < rows; ++r) {
    cpu::write_row(rows_of(a.dv, d, head, t0 + r, d.m), w.rows + r * d.mp, d.m, a.stream_outputs);
  }
  cpu::add_to_state(d, q, w.qt, g, w.gz, r_state, &w.ahead);
  w.ahead.drain();
}

template <typename scalar_t, typename T>
void forward(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t first, int64_t last, T* state) {
  Workspace<T> w(d);
  for (int64_t chunk = first; chunk < last; ++chunk) forward_chunk(d, a, head, chunk * kChunk, w, state);
  tile::fence();
}

template <typename scalar_t, typename T>
void dq(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t first, int64_t last, T* state) {
  Workspace<T> w(d);
  for (int64_t chunk = first; chunk < last; ++chunk) dq_chunk(d, a, head, chunk * kChunk, w, state);
  tile::fence();
}

template <typename scalar_t, typename T>
void dkdv(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t first, int64_t last, T* state) {
  Workspace<T> w(d);
  for (int64_t chunk = last - 1; chunk >= first; --chunk) dkdv_chunk(d, a, head, chunk * kChunk, w, state);
  tile::fence();
}

// What chunks [first, last) add to a running state of `kind`; the order of the chunks does not matter.
template <typename scalar_t, typename T>
void totals(const Dims& d, const Args<scalar_t, T>& a, StateKind kind, int64_t head, int64_t first, int64_t last,
            T* state) {
  Workspace<T> w(d);
  for (int64_t t0 = first * kChunk; t0 < std::min(d.n, last * kChunk); t0 += kChunk) {
    const int64_t rows = std::min(kChunk, d.n - t0);
    prefetch_chunk(d, a, head, t0 + 2 * kChunk, kind == StateKind::kQueryGrad ? kQ | kGrad : kK | kV, w.ahead);
    if (kind == StateKind::kQueryGrad) {
      const T* q = cpu::pack(rows_of(a.q, d, head, t0, d.c), rows, d.c, d.cp, w.q, w.qt);
      const T* g = pack_grad(d, a, head, t0, w, false);
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
                                           &dkdv<scalar_t, T>};

}  // namespace
}  // namespace lintf::sweep
