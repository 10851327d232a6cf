// Chunk-level pieces of the CPU causal product: per-call workspace, packing of the output gradient,
// output rows and the chunk-sum state updates (input rows are packed by common/cpu/pack.h).
// Compiled once per vector path, inside its target region (see vector_path.h); internal linkage
// throughout.
#pragma once

#include "causal/cpu/plan.h"
#include "common/cpu/recurrence.h"
#include "common/cpu/suffix_recurrence.h"
#include "common/cpu/pack.h"

namespace lintf::cpu {
namespace {

using tile::kWidth;

// Scratch tiles of one sweep, 64-byte aligned; the size is independent of N.
template <typename T>
struct Workspace {
  T *q, *qt, *k, *kt, *v, *vt, *g, *o, *gz, *rows, *cols;  // kChunk rows (gz: kChunk values)
  T* partial;  // kChunk x tile::kMergedRows vectors: dk's partial sums in tile::merged_suffix_recurrence
  T* state_t;  // mp x cp: the transposed suffix state the reverse sweep keeps beside the state
  tile::PrefetchQueue ahead;  // rows of a later chunk, asked for while this one computes

  explicit Workspace(const Dims& d) : buffer_(size(d)) {
    const int64_t wide = std::max(d.cp, d.mp);
    const std::pair<T**, int64_t> slots[] = {{&q, d.cp}, {&qt, d.cp}, {&k, d.cp},   {&kt, d.cp},
                                             {&v, d.mp}, {&vt, d.mp}, {&g, d.mp},   {&o, d.mp},
                                             {&gz, 1},   {&rows, wide}, {&cols, wide},
                                             {&partial, tile::kMergedRows * kWidth<T>}};
    T* next = buffer_.data();
    for (const auto& [slot, width] : slots) {
      *slot = next;
      next += kChunk * width;  // kChunk elements of fp32 or fp64 are a multiple of 64 bytes
    }
    state_t = next;
  }

 private:
  static int64_t size(const Dims& d) {
    // the slots, then state_t
    return kChunk * (4 * d.cp + 4 * d.mp + 1 + 2 * std::max(d.cp, d.mp) + tile::kMergedRows * kWidth<T>) + d.cp * d.mp;
  }
  AlignedBuffer<T> buffer_;
};

// Packs the output gradient as the sweeps consume it and returns that tile (w.g, or the input
// itself when it already is one and there is no normaliser).
// With the normaliser, out_i = a_i / d_i gives dL/da_i = g_i / d_i and
// dL/dd_i = -(g_i / d_i) . out_i; the latter (w.gz) is the gradient of the implicit all-ones value
// column that produced d_i. It is computed from `out` and kept in `saved_gz` when both are given,
// and read from `saved_gz` without touching `out` when out is null.
template <typename scalar_t, typename T>
const T* pack_grad(const scalar_t* grad, const scalar_t* out, const T* den, T* saved_gz, int64_t rows, int64_t m,
                   int64_t ld, Workspace<T>& w) {
  std::fill(w.gz, w.gz + kChunk, T(0));
  if (den == nullptr) return pack(grad, rows, m, ld, w.g, static_cast<T*>(nullptr));
  const T* o = out == nullptr ? nullptr : pack(out, rows, m, ld, w.o, static_cast<T*>(nullptr));
  for (int64_t r = 0; r < rows; ++r) {
    const T inv = T(1) / den[r];
    T* row = w.g + r * ld;
    for (int64_t c = 0; c < m; ++c) row[c] = static_cast<T>(grad[r * m + c]) * inv;
    std::fill(row + m, row + ld, T(0));
    w.gz[r] = o == nullptr ? saved_gz[r] : -tile::dot<T>(row, o + r * ld, ld);
  }
  if (o != nullptr && saved_gz != nullptr) std::copy(w.gz, w.gz + rows, saved_gz);
  std::fill(w.g + rows * ld, w.g + kChunk * ld, T(0));
  return w.g;
}

// Writes n values of an accumulation-dtype row (vector-aligned scratch) to an output row. With
// `streamed`, an fp32 or fp64 row that starts on a vector boundary bypasses the caches
// (tile::stream): an output larger than the caches is written once and read by nobody before it
// leaves them, so fetching its lines first, as plain stores do, would only cost bandwidth.
template <typename scalar_t, typename T>
void write_row(scalar_t* dst, const T* row, int64_t n, bool streamed) {
  if constexpr (std::is_same_v<scalar_t, T>) {
    if (streamed && n % kWidth<T> == 0 && reinterpret_cast<std::uintptr_t>(dst) % tile::kVectorBytes == 0) {
      for (int64_t c = 0; c < n; c += kWidth<T>) tile::stream<T>(dst + c, tile::load<T>(row + c));
      return;
    }
  }
  for (int64_t c = 0; c < n; ++c) dst[c] = static_cast<scalar_t>(row[c]);
}

// z[c] += sum_r w[r] x[r][c] (w = ones when null) for a kChunk x ld tile x.
template <typename T>
void add_column_sums(const T* x, int64_t ld, const T* w, T* z) {
  for (int64_t c0 = 0; c0 < ld; c0 += kWidth<T>) {
    auto acc = tile::load<T>(z + c0);
    for (int64_t r = 0; r < kChunk; ++r) acc += (w == nullptr ? T(1) : w[r]) * tile::load<T>(x + r * ld + c0);
    tile::store<T>(z + c0, acc);
  }
}

// state[:C*M] += X^T Y and state[C*M:] += X^T w (w = ones when null), X given with its transpose xt.
template <typename T>
void add_to_state(const Dims& d, const T* x, const T* xt, const T* y, const T* w, T* state,
                  tile::PrefetchQueue* ahead = nullptr) {
  tile::gemm<T>(d.cp, d.mp, kChunk, xt, kChunk, y, d.mp, state, d.mp, true, tile::Shape::kFull, ahead);
  add_column_sums(x, d.cp, w, state + d.cp * d.mp);
}

// The same key state stored value-major: state[:M*C] += V^T K (M x C), state[M*C:] += K^T 1,
// so the dq sweep can use it as the right operand of G S^T without transposing G.
template <typename T>
void add_to_value_major_state(const Dims& d, const T* vt, const T* k, T* state, tile::PrefetchQueue* ahead = nullptr) {
  tile::gemm<T>(d.mp, d.cp, kChunk, vt, kChunk, k, d.cp, state, d.cp, true, tile::Shape::kFull, ahead);
  add_column_sums(k, d.cp, static_cast<const T*>(nullptr), state + d.cp * d.mp);
}

}  // namespace
}  // namespace lintf::cpu
