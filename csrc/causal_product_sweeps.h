// Per-head sweeps of the CPU causal product over chunks, and the states that connect them.
//
// Forward, per chunk of kChunk positions with running state S = sum_j k_j v_j^T, z = sum_j k_j:
//   out = tril(Q K^T) V + Q S,  den = rowsum(tril(Q K^T)) + Q z + eps,  then S += K^T V, z += K^T 1.
// Backward (paper eq. 13-15, normaliser folded in as an all-ones value column whose gradient is
// gz): a forward sweep gives dq from the prefix state S (kept value-major, S^T, so G S^T needs no
// transpose), a reverse sweep gives dk and dv from the suffix state R = sum_i q_i g_i^T,
// r = sum_i q_i gz_i. Both sweeps keep only O(C M) state per thread, so memory beyond inputs,
// outputs and gradients does not grow with N.
// An initial state (S0, z0) is where the forward and dq sweeps start instead of zeros; the reverse
// sweep starts from the gradient of the final state (its effect on dk and dv is exactly that of
// later positions) and ends holding the gradient of the initial state.
// Heads run in parallel; with fewer heads than threads each head is also cut into segments whose
// starting states come from a cheap state-only pass (segment_states).
#pragma once

#include "causal_product_cpu.h"

#include <algorithm>
#include <cstdint>
#include <vector>

// Internal linkage on purpose: only causal_product.cpp includes this header, and GCC inlines the
// once-called chunk steps into their sweeps only for internal functions (5% of the forward's time).
namespace lintf::sweep {
namespace {

using cpu::Dims;
using cpu::kChunk;
using cpu::Workspace;
using tile::Shape;

// Raw pointers of one call (all tensors contiguous) and its flags.
template <typename scalar_t, typename T>
struct Args {
  const scalar_t *q, *k, *v;
  const scalar_t *grad = nullptr, *out = nullptr;  // backward only
  const T* den = nullptr;                            // backward with normalize only
  scalar_t* result = nullptr;                        // forward only
  T* den_out = nullptr;                              // forward with normalize only
  scalar_t *dq = nullptr, *dk = nullptr, *dv = nullptr;
  const T *kv0 = nullptr, *z0 = nullptr;             // initial state (heads, C, M), (heads, C); null: zeros
  const T *grad_kv = nullptr, *grad_z = nullptr;     // backward: gradient of the final state; null: zeros
  T *state_kv = nullptr, *state_z = nullptr;         // forward: final state; backward: initial state's gradient
  T eps = 0;
  bool normalize = false;
};

// Rows [t0, ...) of one head of a contiguous (heads, n, width) tensor.
template <typename P>
P* rows_of(P* base, const Dims& d, int64_t head, int64_t t0, int64_t width) {
  return base == nullptr ? nullptr : base + (head * d.n + t0) * width;
}

// Prefetches rows [t0, t0 + kChunk) of head `head` (if inside the sequence) of the given inputs.
template <typename scalar_t, typename T>
void prefetch_chunk(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t t0, bool grads) {
  if (t0 < 0 || t0 >= d.n) return;
  const int64_t rows = std::min(kChunk, d.n - t0);
  cpu::prefetch(rows_of(a.q, d, head, t0, d.c), rows * d.c);
  cpu::prefetch(rows_of(a.k, d, head, t0, d.c), rows * d.c);
  cpu::prefetch(rows_of(a.v, d, head, t0, d.m), rows * d.m);
  if (grads) {
    cpu::prefetch(rows_of(a.grad, d, head, t0, d.m), rows * d.m);
    if (a.normalize) cpu::prefetch(rows_of(a.out, d, head, t0, d.m), rows * d.m);
  }
}

// Runs fn(head, segment) over all work items, in parallel, one item per grain.
template <typename Fn>
void for_each_segment(const Dims& d, const Fn& fn) {
  at::parallel_for(0, d.heads * d.segments, 1, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) fn(item / d.segments, item % d.segments);
  });
}

// Which running state a segment hands on: sum k v^T (C x M) and sum k for the forward, the same
// stored value-major (M x C) for the dq sweep, sum q g^T and sum q gz for the dk/dv sweep.
enum class StateKind { kKeyValue, kValueKey, kQueryGrad };

// The state a sweep of `kind` holds before its first position, for one head: the initial state
// (kKeyValue, kValueKey) or the final state's gradient (kQueryGrad, a reverse sweep).
template <typename scalar_t, typename T>
void boundary_state(const Dims& d, const Args<scalar_t, T>& a, StateKind kind, int64_t head, T* state) {
  const bool reverse = kind == StateKind::kQueryGrad;
  const T* kv = reverse ? a.grad_kv : a.kv0;
  const T* z = reverse ? a.grad_z : a.z0;
  cpu::load_state(d, kv == nullptr ? nullptr : kv + head * d.c * d.m, z == nullptr ? nullptr : z + head * d.c,
                  kind == StateKind::kValueKey, state);
}

// States each segment starts from, (heads, segments, state_size): the boundary state plus the
// exclusive prefix (suffix for kQueryGrad) of the per-segment totals.
template <typename scalar_t, typename T>
std::vector<T> segment_states(const Dims& d, const Args<scalar_t, T>& a, StateKind kind) {
  const int64_t size = d.state_size();
  const bool reverse = kind == StateKind::kQueryGrad;
  std::vector<T> states(d.heads * d.segments * size, T(0));
  for_each_segment(d, [&](int64_t head, int64_t seg) {
    Workspace<T> w(d);
    T* state = states.data() + (head * d.segments + seg) * size;
    const int64_t first = seg * d.segment_chunks, last = std::min(d.chunks, first + d.segment_chunks);
    for (int64_t t0 = first * kChunk; t0 < std::min(d.n, last * kChunk); t0 += kChunk) {
      const int64_t rows = std::min(kChunk, d.n - t0);
      if (reverse) {
        cpu::pack(rows_of(a.q, d, head, t0, d.c), rows, d.c, d.cp, w.q.data(), w.qt.data());
        cpu::pack_grad(rows_of(a.grad, d, head, t0, d.m), rows_of(a.out, d, head, t0, d.m),
                       rows_of(a.den, d, head, t0, 1), rows, d.m, d.mp, w.g.data(), static_cast<T*>(nullptr),
                       w.gz.data());
        cpu::add_to_state(d, w.qt.data(), w.g.data(), w.gz.data(), state);
        continue;
      }
      const bool value_major = kind == StateKind::kValueKey;
      const T* k = cpu::pack(rows_of(a.k, d, head, t0, d.c), rows, d.c, d.cp, w.k.data(),
                             value_major ? static_cast<T*>(nullptr) : w.kt.data());
      const T* v = cpu::pack(rows_of(a.v, d, head, t0, d.m), rows, d.m, d.mp, w.v.data(),
                             value_major ? w.vt.data() : static_cast<T*>(nullptr));
      if (value_major) {
        cpu::add_to_value_major_state(d, w.vt.data(), k, state);
      } else {
        cpu::add_to_state(d, w.kt.data(), v, static_cast<const T*>(nullptr), state);
      }
    }
  });
  std::vector<T> carry(size);
  for (int64_t head = 0; head < d.heads; ++head) {
    boundary_state(d, a, kind, head, carry.data());
    for (int64_t step = 0; step < d.segments; ++step) {
      T* state = states.data() + (head * d.segments + (reverse ? d.segments - 1 - step : step)) * size;
      for (int64_t i = 0; i < size; ++i) {
        const T total = state[i];
        state[i] = carry[i];
        carry[i] += total;
      }
    }
  }
  return states;
}

template <typename scalar_t, typename T>
void start_state(const Dims& d, const Args<scalar_t, T>& a, StateKind kind, const std::vector<T>& states,
                 int64_t head, int64_t seg, Workspace<T>& w) {
  if (states.empty()) {
    boundary_state(d, a, kind, head, w.state.data());
  } else {
    const T* src = states.data() + (head * d.segments + seg) * d.state_size();
    std::copy(src, src + d.state_size(), w.state.begin());
  }
}

template <typename scalar_t, typename T>
void forward_chunk(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t t0, Workspace<T>& w) {
  const int64_t rows = std::min(kChunk, d.n - t0);
  const T* q = cpu::pack(rows_of(a.q, d, head, t0, d.c), rows, d.c, d.cp, w.q.data(), static_cast<T*>(nullptr));
  cpu::pack(rows_of(a.k, d, head, t0, d.c), rows, d.c, d.cp, w.k.data(), w.kt.data());
  const T* v = cpu::pack(rows_of(a.v, d, head, t0, d.m), rows, d.m, d.mp, w.v.data(), static_cast<T*>(nullptr));
  prefetch_chunk(d, a, head, t0 + kChunk, false);
  T *s = w.state.data(), *z = s + d.cp * d.mp, *num = w.rows.data();
  tile::gemm<T>(kChunk, kChunk, d.cp, q, d.cp, w.kt.data(), kChunk, w.square.data(), kChunk, false,
                Shape::kLowerOut);
  cpu::mask<T>(w.square.data(), true, nullptr, nullptr, w.den.data());
  tile::gemm<T>(kChunk, d.mp, kChunk, w.square.data(), kChunk, v, d.mp, num, d.mp, false, Shape::kLowerA);
  tile::gemm<T>(kChunk, d.mp, d.cp, q, d.cp, s, d.mp, num, d.mp, true);
  for (int64_t r = 0; r < rows; ++r) {
    T den = 1;
    if (a.normalize) {
      den = w.den[r] + a.eps;
      for (int64_t c = 0; c < d.cp; ++c) den += q[r * d.cp + c] * z[c];
      a.den_out[head * d.n + t0 + r] = den;
    }
    scalar_t* dst = rows_of(a.result, d, head, t0 + r, d.m);
    for (int64_t c = 0; c < d.m; ++c) dst[c] = static_cast<scalar_t>(num[r * d.mp + c] / den);
  }
  cpu::add_to_state(d, w.kt.data(), v, static_cast<const T*>(nullptr), s);
}

// dq_i = sum_{j<=i} (g_i . v_j + gz_i) k_j, with the value-major prefix state for earlier chunks.
template <typename scalar_t, typename T>
void dq_chunk(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t t0, Workspace<T>& w) {
  const int64_t rows = std::min(kChunk, d.n - t0);
  cpu::pack_grad(rows_of(a.grad, d, head, t0, d.m), rows_of(a.out, d, head, t0, d.m),
                 rows_of(a.den, d, head, t0, 1), rows, d.m, d.mp, w.g.data(), static_cast<T*>(nullptr), w.gz.data());
  const T* k = cpu::pack(rows_of(a.k, d, head, t0, d.c), rows, d.c, d.cp, w.k.data(), static_cast<T*>(nullptr));
  cpu::pack(rows_of(a.v, d, head, t0, d.m), rows, d.m, d.mp, w.v.data(), w.vt.data());
  prefetch_chunk(d, a, head, t0 + kChunk, true);
  T *st = w.state.data(), *z = st + d.cp * d.mp, *dq = w.rows.data();
  tile::gemm<T>(kChunk, kChunk, d.mp, w.g.data(), d.mp, w.vt.data(), kChunk, w.square.data(), kChunk, false,
                Shape::kLowerOut);
  cpu::mask<T>(w.square.data(), true, w.gz.data(), nullptr, nullptr);
  tile::gemm<T>(kChunk, d.cp, kChunk, w.square.data(), kChunk, k, d.cp, dq, d.cp, false, Shape::kLowerA);
  tile::gemm<T>(kChunk, d.cp, d.mp, w.g.data(), d.mp, st, d.cp, dq, d.cp, true);
  for (int64_t r = 0; r < rows; ++r) {
    scalar_t* dst = rows_of(a.dq, d, head, t0 + r, d.c);
    for (int64_t c = 0; c < d.c; ++c) dst[c] = static_cast<scalar_t>(dq[r * d.cp + c] + w.gz[r] * z[c]);
  }
  cpu::add_to_value_major_state(d, w.vt.data(), k, st);
}

// dk_j = sum_{i>=j} (v_j . g_i + gz_i) q_i and dv_j = sum_{i>=j} (k_j . q_i) g_i, with the
// suffix state for later chunks.
template <typename scalar_t, typename T>
void dkdv_chunk(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t t0, Workspace<T>& w) {
  const int64_t rows = std::min(kChunk, d.n - t0);
  cpu::pack_grad(rows_of(a.grad, d, head, t0, d.m), rows_of(a.out, d, head, t0, d.m),
                 rows_of(a.den, d, head, t0, 1), rows, d.m, d.mp, w.g.data(), w.gt.data(), w.gz.data());
  const T* q = cpu::pack(rows_of(a.q, d, head, t0, d.c), rows, d.c, d.cp, w.q.data(), w.qt.data());
  const T* k = cpu::pack(rows_of(a.k, d, head, t0, d.c), rows, d.c, d.cp, w.k.data(), static_cast<T*>(nullptr));
  const T* v = cpu::pack(rows_of(a.v, d, head, t0, d.m), rows, d.m, d.mp, w.v.data(), w.vt.data());
  prefetch_chunk(d, a, head, t0 - kChunk, true);
  T *r_state = w.state.data(), *r_ones = r_state + d.cp * d.mp, *sq = w.square.data();
  tile::gemm<T>(kChunk, kChunk, d.mp, v, d.mp, w.gt.data(), kChunk, sq, kChunk, false, Shape::kUpperOut);
  cpu::mask<T>(sq, false, nullptr, w.gz.data(), nullptr);
  tile::gemm<T>(kChunk, d.cp, kChunk, sq, kChunk, q, d.cp, w.rows.data(), d.cp, false, Shape::kUpperA);
  tile::gemm<T>(d.cp, kChunk, d.mp, r_state, d.mp, w.vt.data(), kChunk, w.cols.data(), kChunk, false);
  for (int64_t r = 0; r < rows; ++r) {
    scalar_t* dst = rows_of(a.dk, d, head, t0 + r, d.c);
    for (int64_t c = 0; c < d.c; ++c) {
      dst[c] = static_cast<scalar_t>(w.rows[r * d.cp + c] + w.cols[c * kChunk + r] + r_ones[c]);
    }
  }
  tile::gemm<T>(kChunk, kChunk, d.cp, k, d.cp, w.qt.data(), kChunk, sq, kChunk, false, Shape::kUpperOut);
  cpu::mask<T>(sq, false, nullptr, nullptr, nullptr);
  tile::gemm<T>(kChunk, d.mp, kChunk, sq, kChunk, w.g.data(), d.mp, w.rows.data(), d.mp, false, Shape::kUpperA);
  tile::gemm<T>(kChunk, d.mp, d.cp, k, d.cp, r_state, d.mp, w.rows.data(), d.mp, true);
  for (int64_t r = 0; r < rows; ++r) {
    scalar_t* dst = rows_of(a.dv, d, head, t0 + r, d.m);
    for (int64_t c = 0; c < d.m; ++c) dst[c] = static_cast<scalar_t>(w.rows[r * d.mp + c]);
  }
  cpu::add_to_state(d, w.qt.data(), w.g.data(), w.gz.data(), r_state);
}

template <typename scalar_t, typename T>
void run_forward(const Dims& d, const Args<scalar_t, T>& a) {
  const std::vector<T> starts = d.segments > 1 ? segment_states(d, a, StateKind::kKeyValue) : std::vector<T>();
  for_each_segment(d, [&](int64_t head, int64_t seg) {
    Workspace<T> w(d);
    start_state(d, a, StateKind::kKeyValue, starts, head, seg, w);
    const int64_t first = seg * d.segment_chunks, last = std::min(d.chunks, first + d.segment_chunks);
    for (int64_t chunk = first; chunk < last; ++chunk) forward_chunk(d, a, head, chunk * kChunk, w);
    if (seg == d.segments - 1) {  // the last segment ends on the final state
      cpu::store_state(d, w.state.data(), a.state_kv + head * d.c * d.m, a.state_z + head * d.c);
    }
  });
}

template <typename scalar_t, typename T>
void run_backward(const Dims& d, const Args<scalar_t, T>& a) {
  const bool split = d.segments > 1;
  const std::vector<T> prefix = split ? segment_states(d, a, StateKind::kValueKey) : std::vector<T>();
  const std::vector<T> suffix = split ? segment_states(d, a, StateKind::kQueryGrad) : std::vector<T>();
  for_each_segment(d, [&](int64_t head, int64_t seg) {
    Workspace<T> w(d);
    const int64_t first = seg * d.segment_chunks, last = std::min(d.chunks, first + d.segment_chunks);
    start_state(d, a, StateKind::kValueKey, prefix, head, seg, w);
    for (int64_t chunk = first; chunk < last; ++chunk) dq_chunk(d, a, head, chunk * kChunk, w);
    start_state(d, a, StateKind::kQueryGrad, suffix, head, seg, w);
    for (int64_t chunk = last - 1; chunk >= first; --chunk) dkdv_chunk(d, a, head, chunk * kChunk, w);
    if (seg == 0) cpu::store_state(d, w.state.data(), a.state_kv + head * d.c * d.m, a.state_z + head * d.c);
  });
}

}  // namespace
}  // namespace lintf::sweep
