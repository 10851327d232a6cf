// Chunk sweeps of the CPU decayed causal product (see ../decayed_product.h for the semantics; passes.h
// runs them per head). Included once by each decayed_product_<path>.cpp inside its target region
// (vector_path.h). Internal linkage throughout.
//
// Every sweep is the causal product's register-tiled recurrence (common/cpu/recurrence.h, and the
// merged reverse kernel of suffix_recurrence.h), which executes the minimal 4 C M flops per position
// and step, with the decays moved onto the rows it reads. With c_t the cumulative log decay inside
// the chunk and a reference r >= c_t on a segment of positions,
//   S_t = exp(c_t - r) A_t,   A_t = A_{t-1} + (exp(r - c_t) k_t) v_t^T,   out_t = A_t^T (exp(c_t - r) q_t),
// so the state tile is never rescaled per position: keys are scaled up by exp(r - c_t) and queries
// down. A segment ends before exp(r - c_t) would pass exp(kRebase) (fp32 overflows near exp(88));
// then, and at the end of the segment, the stored state is scaled once (C M multiplies). With decays
// of a usual size a chunk is one segment; a position that decays by more than kRebase alone starts a
// segment whose reference is its own c_t, scaling the state by its decay first.
//
// The backward: a forward sweep carries S^T and writes dq_t = S_t g_t and p_t = q_t . dq_t; a reverse
// sweep carries R_t = dL/dS_t = q_t g_t^T + exp(a_{t+1}) R_{t+1} and writes dk_t = R_t v_t, dv_t = R_t^T k_t.
// With x_t = <R_t, S_t>, d log_decay_t = <R_t, exp(a_t) S_{t-1}> = x_t - k_t . dk_t and
// x_{t-1} = p_{t-1} + x_t - k_t . dk_t, from x_N = <dL/dS_N, S_N> + p_N: no state of the forward sweep
// is needed in the reverse one.
#pragma once

#include "common/cpu/pack.h"
#include "common/cpu/suffix_recurrence.h"
#include "decayed/decayed_product.h"  // and <cmath>, included first, outside the target region

namespace lintf::decayed {
namespace {

using cpu::kChunk;

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

// The largest log factor a segment scales a row up by (exp(20) ~ 4.9e8, far from fp32's overflow).
constexpr double kRebase = 20;

// Positions [begin, end) of a chunk that share the reference `ref` of their scaled rows.
template <typename T>
struct Segment {
  int64_t begin, end;
  T ref, before;  // before: the cumulative log decay ahead of the segment's first position
};

// Scratch of one head's passes, 64-byte aligned; the size is independent of N.
template <typename T>
struct Workspace {
  T *q, *k, *qs, *ks, *out_c;  // kChunk x cp: packed rows, scaled rows, dq or dk rows
  T *v, *g, *vs, *gs, *out_m;  // kChunk x mp: packed rows, scaled rows, output or dv rows
  T* partial;                  // kChunk x tile::kMergedRows vectors: dk's partial sums (tile::merged_suffix_recurrence)
  T* c;                        // kChunk: cumulative log decays inside the chunk
  T *state, *suffix, *suffix_t;  // S (or S^T), R = dL/dS (cp x mp) and R^T (mp x cp)
  Segment<T> segments[kChunk];
  int64_t segment_count = 0;
  tile::PrefetchQueue ahead;  // rows of a later chunk, asked for while this one computes

  explicit Workspace(const Dims& d)
      : buffer_(kChunk * (5 * d.cp + 5 * d.mp + tile::kMergedRows * tile::kWidth<T> + 1) + 3 * d.cp * d.mp) {
    T* next = buffer_.data();
    for (T** slot : {&q, &k, &qs, &ks, &out_c}) *slot = next, next += kChunk * d.cp;
    for (T** slot : {&v, &g, &vs, &gs, &out_m}) *slot = next, next += kChunk * d.mp;
    partial = next, next += kChunk * tile::kMergedRows * tile::kWidth<T>;
    c = next, next += kChunk;  // kChunk elements of fp32 or fp64: a 64-byte multiple
    state = next, suffix = next + d.cp * d.mp, suffix_t = next + 2 * d.cp * d.mp;
  }

 private:
  cpu::AlignedBuffer<T> buffer_;
};

template <typename T>
void scale(T* x, T factor, int64_t n) {
  if (factor == T(1)) return;
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

// The chunk's cumulative log decays (padded rows decay nothing) and its segments (see the top).
template <typename T>
void chunk_segments(const T* log_decay, int64_t rows, Workspace<T>& w) {
  T total = 0;
  for (int64_t t = 0; t < kChunk; ++t) w.c[t] = total += t < rows ? log_decay[t] : T(0);
  w.segment_count = 0;
  for (int64_t begin = 0; begin < rows;) {
    const T before = begin == 0 ? T(0) : w.c[begin - 1];
    const T ref = before - w.c[begin] <= T(kRebase) ? before : w.c[begin];
    int64_t end = begin + 1;
    while (end < rows && ref - w.c[end] <= T(kRebase)) ++end;
    w.segments[w.segment_count++] = {begin, end, ref, before};
    begin = end;
  }
}

// dst row t = exp(sign (c_t - ref)) src row t for the segment's rows (tiles of width ld).
template <typename T>
void scale_segment_rows(const T* src, int64_t ld, const Segment<T>& s, const T* c, T sign, T* dst) {
  for (int64_t t = s.begin; t < s.end; ++t) {
    const T exponent = sign * (c[t] - s.ref);
    const T factor = exponent <= T(0) ? exp_nonpositive(exponent) : std::exp(exponent);
    for (int64_t i = 0; i < ld; ++i) dst[t * ld + i] = factor * src[t * ld + i];
  }
}

// A forward-direction sweep over the chunk: for out_t = S_t^T query_t with S_t = exp(a_t) S_{t-1} +
// key_t value_t^T and the state in `state` (key_width x value_width), left holding S at the chunk's end.
template <typename T>
void decayed_recurrence(const T* query, const T* key, int64_t key_width, const T* value, int64_t value_width,
                        T* state, T* out, T* scaled_query, T* scaled_key, Workspace<T>& w) {
  const int64_t size = key_width * value_width;
  for (int64_t i = 0; i < w.segment_count; ++i) {
    const Segment<T>& s = w.segments[i];
    scale(state, exp_nonpositive(s.ref - s.before), size);
    scale_segment_rows(query, key_width, s, w.c, T(1), scaled_query);
    scale_segment_rows(key, key_width, s, w.c, T(-1), scaled_key);
    const int64_t at = s.begin * key_width;
    tile::recurrence<T>(s.end - s.begin, false, scaled_query + at, scaled_key + at, key_width,
                        value + s.begin * value_width, value_width, state, out + s.begin * value_width, &w.ahead);
    scale(state, exp_nonpositive(w.c[s.end - 1] - s.ref), size);
  }
}

// A chunk's rows as padded tiles: q, k (kChunk x cp), v and, in the backward, g (kChunk x mp).
template <typename T>
struct Chunk {
  const T *q, *k, *v, *g;
  int64_t rows;
};

// The chunk at t0: its rows (packed where they are not tiles already), cumulative decays and segments.
template <typename scalar_t, typename T>
Chunk<T> load_chunk(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t t0, Workspace<T>& w) {
  const int64_t rows = std::min(kChunk, d.n - t0);
  chunk_segments(rows_of(a.log_decay, d, head, t0, 1), rows, w);
  auto packed = [&](const scalar_t* base, int64_t width, int64_t padded, T* buffer) -> const T* {
    return base == nullptr ? nullptr : cpu::pack(rows_of(base, d, head, t0, width), rows, width, padded, buffer,
                                                 static_cast<T*>(nullptr));
  };
  return {packed(a.q, d.c, d.cp, w.q), packed(a.k, d.c, d.cp, w.k), packed(a.v, d.m, d.mp, w.v),
          packed(a.grad, d.m, d.mp, w.g), rows};
}

// Queues for w.ahead the rows a sweep reads (q, k, v and, in the backward, g) of the chunk at t0, when
// inside the sequence: a later chunk, fetched from memory while this one computes (common/cpu/prefetch.h).
template <typename scalar_t, typename T>
void prefetch_chunk(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t t0, Workspace<T>& w) {
  if (t0 >= 0 && t0 < d.n) {
    const int64_t bytes = std::min(kChunk, d.n - t0) * static_cast<int64_t>(sizeof(scalar_t));
    w.ahead.add(rows_of(a.q, d, head, t0, d.c), bytes * d.c);
    w.ahead.add(rows_of(a.k, d, head, t0, d.c), bytes * d.c);
    w.ahead.add(rows_of(a.v, d, head, t0, d.m), bytes * d.m);
    w.ahead.add(rows_of(a.grad, d, head, t0, d.m), bytes * d.m);
  }
  w.ahead.start();
}

// out = the chunk's outputs, S = the state after it.
template <typename scalar_t, typename T>
void forward_chunk(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t t0, Workspace<T>& w) {
  const Chunk<T> chunk = load_chunk(d, a, head, t0, w);
  prefetch_chunk(d, a, head, t0 + a.prefetch_chunks * kChunk, w);
  decayed_recurrence(chunk.q, chunk.k, d.cp, chunk.v, d.mp, w.state, w.out_m, w.qs, w.ks, w);
  store(w.out_m, chunk.rows, d.m, d.mp, rows_of(a.out, d, head, t0, d.m));
  w.ahead.drain();
}

// dq_t = S_t g_t with S^T (mp x cp) in w.state, left holding S^T at the chunk's end; p_t = q_t . dq_t.
// Prefetches the rows of the chunk at ahead_t0 (none when outside the sequence).
template <typename scalar_t, typename T>
void dq_chunk(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t t0, int64_t ahead_t0, Workspace<T>& w) {
  const Chunk<T> chunk = load_chunk(d, a, head, t0, w);
  prefetch_chunk(d, a, head, ahead_t0, w);
  decayed_recurrence(chunk.g, chunk.v, d.mp, chunk.k, d.cp, w.state, w.out_c, w.gs, w.vs, w);
  T* p = rows_of(a.d_log_decay, d, head, t0, 1);
  for (int64_t t = 0; t < chunk.rows; ++t) p[t] = tile::dot<T>(chunk.q + t * d.cp, w.out_c + t * d.cp, d.cp);
  store(w.out_c, chunk.rows, d.c, d.cp, rows_of(a.dq, d, head, t0, d.c), a.stream_gradients);
  w.ahead.drain();
}

// The reverse sweep over one segment: R_t = exp(c_e - c_t) (R' + sum_{s=t..e} exp(c_s - c_e) q_s g_s^T)
// with e its last position and R' what entered it; leaves exp(a_begin) R_begin for the positions before.
template <typename T>
void reverse_segment(const Dims& d, const Segment<T>& s, const Chunk<T>& chunk, Workspace<T>& w) {
  const Segment<T> to_end{s.begin, s.end, w.c[s.end - 1], s.before};
  scale_segment_rows(chunk.q, d.cp, to_end, w.c, T(1), w.qs);
  scale_segment_rows(chunk.k, d.cp, to_end, w.c, T(-1), w.ks);
  scale_segment_rows(chunk.v, d.mp, to_end, w.c, T(-1), w.vs);
  const T* g = chunk.g;
  const int64_t rows = s.end - s.begin, at_c = s.begin * d.cp, at_m = s.begin * d.mp;
  if constexpr (tile::kMerged<T>) {
    tile::merged_suffix_recurrence(rows, w.qs + at_c, w.ks + at_c, d.cp, g + at_m, w.vs + at_m, d.mp, w.suffix,
                                   w.out_m + at_m, w.out_c + at_c, w.partial, &w.ahead);
  } else {
    tile::recurrence<T>(rows, true, w.ks + at_c, w.qs + at_c, d.cp, g + at_m, d.mp, w.suffix, w.out_m + at_m,
                        &w.ahead);
    tile::recurrence<T>(rows, true, w.vs + at_m, g + at_m, d.mp, w.qs + at_c, d.cp, w.suffix_t, w.out_c + at_c,
                        &w.ahead);
  }
  const T factor = exp_nonpositive(to_end.ref - s.before);
  scale(w.suffix, factor, d.cp * d.mp);
  if constexpr (!tile::kMerged<T>) scale(w.suffix_t, factor, d.cp * d.mp);
}

// dk, dv of the chunk from R (w.suffix, and w.suffix_t = R^T off the merged path), then R entering it;
// d log_decay from x = <R, S> at the chunk's end (returned at its start, see the top).
template <typename scalar_t, typename T>
T dkdv_chunk(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t t0, T x, Workspace<T>& w) {
  const Chunk<T> chunk = load_chunk(d, a, head, t0, w);
  prefetch_chunk(d, a, head, t0 - a.prefetch_chunks * kChunk, w);
  for (int64_t i = w.segment_count - 1; i >= 0; --i) reverse_segment(d, w.segments[i], chunk, w);
  T* gradient = rows_of(a.d_log_decay, d, head, t0, 1);  // holds p_t from the dq sweep
  for (int64_t t = chunk.rows - 1; t >= 0; --t) {
    x += gradient[t];
    x -= tile::dot<T>(chunk.k + t * d.cp, w.out_c + t * d.cp, d.cp);
    gradient[t] = x;
  }
  store(w.out_c, chunk.rows, d.c, d.cp, rows_of(a.dk, d, head, t0, d.c), a.stream_gradients);
  store(w.out_m, chunk.rows, d.m, d.mp, rows_of(a.dv, d, head, t0, d.m), a.stream_gradients);
  w.ahead.drain();
  return x;
}

}  // namespace
}  // namespace lintf::decayed
