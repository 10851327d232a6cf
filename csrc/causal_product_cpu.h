// Chunk-level pieces of the CPU causal product: problem dimensions, per-thread workspace,
// packing of input rows into padded fp32/fp64 tiles (and their transposes), the causal mask,
// the running-state updates and the copies of a state between its padded running form and the
// (C x M, C) tensors the op takes and returns.
//
// A chunk is kChunk consecutive positions of one (batch, head). Its rows are used in place when
// they already form a tile (fp32/fp64, full chunk, feature width a multiple of the register
// block), else packed into zero-padded tiles, so every product in the sweeps is a full-tile
// tile::gemm and padded rows/columns contribute exact zeros.
#pragma once

#include "causal_product_tile.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

namespace lintf::cpu {

constexpr int64_t kChunk = 32;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Sizes of one call: heads are split into `segments` runs of `segment_chunks` chunks when there
// are fewer (batch * head) rows than threads, so the threads also share the sequence.
struct Dims {
  int64_t heads, n, c, m, cp, mp, chunks, segments, segment_chunks;

  Dims(int64_t heads_, int64_t n_, int64_t c_, int64_t m_, int64_t col_block)
      : heads(heads_), n(n_), c(c_), m(m_) {
    cp = ceil_div(c, col_block) * col_block;
    mp = ceil_div(m, col_block) * col_block;
    chunks = ceil_div(n, kChunk);
    const int64_t threads = at::get_num_threads();
    // at least 4 chunks per segment: shorter ones cost more in the extra state pass than they save
    const int64_t wanted = heads >= threads ? 1 : ceil_div(threads, heads);
    segments = std::max<int64_t>(1, std::min(wanted, chunks / 4));
    segment_chunks = ceil_div(chunks, segments);
    segments = ceil_div(chunks, segment_chunks);
  }

  int64_t state_size() const { return cp * mp + cp; }  // S (C x M) then z (C)
};

// Per-thread scratch: packed tiles of one chunk plus the running state. Size is independent of N.
template <typename T>
struct Workspace {
  std::vector<T> q, qt, k, kt, v, vt, g, gt, gz, square, rows, cols, den, state;

  explicit Workspace(const Dims& d)
      : q(kChunk * d.cp), qt(d.cp * kChunk), k(kChunk * d.cp), kt(d.cp * kChunk), v(kChunk * d.mp),
        vt(d.mp * kChunk), g(kChunk * d.mp), gt(d.mp * kChunk), gz(kChunk), square(kChunk * kChunk),
        rows(kChunk * std::max(d.cp, d.mp)), cols(std::max(d.cp, d.mp) * kChunk), den(kChunk),
        state(d.state_size()) {}
};

#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12)
#define LINTF_HAS_SHUFFLEVECTOR 1
// dst (8 x 8, stride ldd) = transpose of src (8 x 8, stride lds), in registers: 24 shuffles.
inline void transpose8x8(const float* src, int64_t lds, float* dst, int64_t ldd) {
  typedef float V8 __attribute__((vector_size(32)));
  V8 r[8], t[8], u[8];
  for (int i = 0; i < 8; ++i) std::memcpy(&r[i], src + i * lds, sizeof(V8));
  for (int i = 0; i < 8; i += 2) {  // interleave row pairs
    t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  for (int i = 0; i < 8; i += 4) {  // then pairs of pairs
    u[i] = __builtin_shufflevector(t[i], t[i + 2], 0, 1, 8, 9, 4, 5, 12, 13);
    u[i + 1] = __builtin_shufflevector(t[i], t[i + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    u[i + 2] = __builtin_shufflevector(t[i + 1], t[i + 3], 0, 1, 8, 9, 4, 5, 12, 13);
    u[i + 3] = __builtin_shufflevector(t[i + 1], t[i + 3], 2, 3, 10, 11, 6, 7, 14, 15);
  }
  for (int i = 0; i < 4; ++i) {  // then 128-bit halves
    const V8 low = __builtin_shufflevector(u[i], u[i + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    const V8 high = __builtin_shufflevector(u[i], u[i + 4], 4, 5, 6, 7, 12, 13, 14, 15);
    std::memcpy(dst + i * ldd, &low, sizeof(V8));
    std::memcpy(dst + (i + 4) * ldd, &high, sizeof(V8));
  }
}
#endif

// Writes the transpose (ld x kChunk) of a kChunk x ld tile.
template <typename T>
void transpose(const T* src, int64_t ld, T* dst) {
#ifdef LINTF_HAS_SHUFFLEVECTOR
  if constexpr (std::is_same_v<T, float>) {  // ld and kChunk are multiples of 8 for float
    for (int64_t c0 = 0; c0 < ld; c0 += 8) {
      for (int64_t r0 = 0; r0 < kChunk; r0 += 8) transpose8x8(src + r0 * ld + c0, ld, dst + c0 * kChunk + r0, kChunk);
    }
    return;
  }
#endif
  for (int64_t r = 0; r < kChunk; ++r) {
    for (int64_t c = 0; c < ld; ++c) dst[c * kChunk + r] = src[r * ld + c];
  }
}

// A chunk's `rows` rows of a contiguous (rows x cols) slice as a kChunk x ld tile: the input
// itself when it already has that layout (accumulation dtype, full chunk, no padding), else a
// zero-padded copy in buf. When dst_t is given, the tile's transpose (ld x kChunk) goes there.
template <typename scalar_t, typename T>
const T* pack(const scalar_t* src, int64_t rows, int64_t cols, int64_t ld, T* buf, T* dst_t) {
  const T* tile = buf;
  if constexpr (std::is_same_v<scalar_t, T>) {
    if (rows == kChunk && cols == ld) tile = src;
  }
  if (tile == buf) {
    for (int64_t r = 0; r < rows; ++r) {
      const scalar_t* in = src + r * cols;
      T* out = buf + r * ld;
      for (int64_t c = 0; c < cols; ++c) out[c] = static_cast<T>(in[c]);
      std::fill(out + cols, out + ld, T(0));
    }
    std::fill(buf + rows * ld, buf + kChunk * ld, T(0));
  }
  if (dst_t != nullptr) transpose(tile, ld, dst_t);
  return tile;
}

// Asks the caches for `count` elements from `base` on: the next chunk's input rows are fetched
// while this chunk computes instead of stalling its packing loads on DRAM.
template <typename P>
inline void prefetch(const P* base, int64_t count) {
  const char* bytes = reinterpret_cast<const char*>(base);
  for (int64_t offset = 0; offset < count * static_cast<int64_t>(sizeof(P)); offset += 64) {
    __builtin_prefetch(bytes + offset);
  }
}

// Packs the output gradient as the sweeps consume it (its transpose into gt when given). With the normaliser,
// out_i = a_i / d_i gives dL/da_i = g_i / d_i and dL/dd_i = -(g_i . out_i) / d_i; the latter (gz)
// is the gradient of the implicit all-ones value column that produced d_i.
template <typename scalar_t, typename T>
void pack_grad(const scalar_t* grad, const scalar_t* out, const T* den, int64_t rows, int64_t m, int64_t ld,
               T* g, T* gt, T* gz) {
  const T* packed = pack(grad, rows, m, ld, g, static_cast<T*>(nullptr));
  if (packed != g) std::copy(packed, packed + kChunk * ld, g);  // g gets scaled in place below
  std::fill(gz, gz + kChunk, T(0));
  if (den != nullptr) {
    for (int64_t r = 0; r < rows; ++r) {
      const T inv = T(1) / den[r];
      T dot = 0;
      for (int64_t c = 0; c < m; ++c) dot += g[r * ld + c] * static_cast<T>(out[r * m + c]);
      for (int64_t c = 0; c < m; ++c) g[r * ld + c] *= inv;
      gz[r] = -dot * inv;
    }
  }
  if (gt != nullptr) transpose(g, ld, gt);
}

// Applies the causal mask to a kChunk x kChunk tile: keeps j <= i (lower) or j >= i (upper),
// zeroes the rest (including blocks a triangular gemm skipped), adds the optional per-row /
// per-column bias to kept entries and accumulates kept row sums into row_sums.
template <typename T>
void mask(T* tile, bool lower, const T* row_bias, const T* col_bias, T* row_sums) {
  for (int64_t i = 0; i < kChunk; ++i) {
    T sum = 0;
    for (int64_t j = 0; j < kChunk; ++j) {
      T& x = tile[i * kChunk + j];
      if (lower ? j > i : j < i) {
        x = 0;
        continue;
      }
      if (row_bias != nullptr) x += row_bias[i];
      if (col_bias != nullptr) x += col_bias[j];
      sum += x;
    }
    if (row_sums != nullptr) row_sums[i] = sum;
  }
}

// state[:C*M] += X^T Y and state[C*M:] += X^T w (w = ones when null), X^T given packed (cp x kChunk).
template <typename T>
void add_to_state(const Dims& d, const T* xt, const T* y, const T* w, T* state) {
  tile::gemm<T>(d.cp, d.mp, kChunk, xt, kChunk, y, d.mp, state, d.mp, true);
  T* z = state + d.cp * d.mp;
  for (int64_t c = 0; c < d.cp; ++c) {
    T sum = 0;
    for (int64_t r = 0; r < kChunk; ++r) sum += xt[c * kChunk + r] * (w == nullptr ? T(1) : w[r]);
    z[c] += sum;
  }
}

// The same key state stored value-major: state[:M*C] += V^T K (M x C), state[M*C:] += K^T 1,
// so the dq sweep can use it as the right operand of G S^T without transposing G.
template <typename T>
void add_to_value_major_state(const Dims& d, const T* vt, const T* k, T* state) {
  tile::gemm<T>(d.mp, d.cp, kChunk, vt, kChunk, k, d.cp, state, d.cp, true);
  T* z = state + d.cp * d.mp;
  for (int64_t r = 0; r < kChunk; ++r) {
    for (int64_t c = 0; c < d.cp; ++c) z[c] += k[r * d.cp + c];
  }
}

// Fills a padded running state from one head's kv (C x M) and z (C), zeros for a null part:
// state[:cp*mp] holds kv (cp x mp), or its transpose (mp x cp) when value_major, state[cp*mp:] z.
template <typename T>
void load_state(const Dims& d, const T* kv, const T* z, bool value_major, T* state) {
  std::fill(state, state + d.state_size(), T(0));
  if (kv != nullptr) {
    for (int64_t c = 0; c < d.c; ++c) {
      for (int64_t m = 0; m < d.m; ++m) state[value_major ? m * d.cp + c : c * d.mp + m] = kv[c * d.m + m];
    }
  }
  if (z != nullptr) std::copy(z, z + d.c, state + d.cp * d.mp);
}

// Writes the unpadded part of a running state (not value-major) to one head's kv (C x M) and z (C).
template <typename T>
void store_state(const Dims& d, const T* state, T* kv, T* z) {
  for (int64_t c = 0; c < d.c; ++c) std::copy(state + c * d.mp, state + c * d.mp + d.m, kv + c * d.m);
  std::copy(state + d.cp * d.mp, state + d.cp * d.mp + d.c, z);
}

}  // namespace lintf::cpu
