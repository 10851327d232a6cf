// Per-head passes of the CPU decayed causal product (the Passes of one vector path, see
// ../decayed_product.h): the chunk sweeps of sweeps.h in the order a head needs them. Included once
// by each decayed_product_<path>.cpp inside its target region (vector_path.h); internal linkage.
//
// The backward walks spans of chunks from the last to the first. Each span runs its dq sweep forward
// from the state entering it, then its dk, dv sweep in reverse, so the span's rows are read from
// memory once and found in the caches the second time. Without stored states the whole head is one
// span starting from S0; with them a span is state_spacing positions starting from its stored state.
#pragma once

#include "decayed/cpu/sweeps.h"

namespace lintf::decayed {
namespace {

// dst (c x m) = the first c rows and m columns of a padded cp x mp state.
template <typename T>
void save_state(const T* state, const Dims& d, T* dst) {
  for (int64_t i = 0; i < d.c; ++i) std::copy(state + i * d.mp, state + i * d.mp + d.m, dst + i * d.m);
}

// Chunks per span of stored states; every chunk of the head in one span when none are stored.
template <typename scalar_t, typename T>
int64_t span_chunks(const Dims& d, const Args<scalar_t, T>& a) {
  return a.chunk_states == nullptr ? std::max<int64_t>(d.chunks, 1) : a.state_spacing / kChunk;
}

// The stored state (c x m) entering span `span` of one head.
template <typename scalar_t, typename T>
T* stored_state(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t span) {
  const int64_t spans = cpu::ceil_div(d.chunks, span_chunks(d, a));
  return a.chunk_states + (head * spans + span) * d.c * d.m;
}

template <typename scalar_t, typename T>
void forward_head(const Dims& d, const Args<scalar_t, T>& a, int64_t head) {
  Workspace<T> w(d);
  load_state(state_of(a.state0, d, head), d, false, w.state);
  const int64_t span = span_chunks(d, a);
  for (int64_t chunk = 0; chunk < d.chunks; ++chunk) {
    if (a.chunk_states != nullptr && chunk % span == 0) save_state(w.state, d, stored_state(d, a, head, chunk / span));
    forward_chunk(d, a, head, chunk * kChunk, w);
  }
  save_state(w.state, d, state_of(a.state_out, d, head));
}

// R = dL/dS_N into w.suffix (and its transpose into w.suffix_t off the merged path); returns
// <dL/dS_N, S_N> with S_N^T in w.state.
template <typename scalar_t, typename T>
T start_reverse(const Dims& d, const Args<scalar_t, T>& a, int64_t head, Workspace<T>& w) {
  const T* grad_state = state_of(a.grad_state, d, head);
  T x = 0;
  for (int64_t i = 0; grad_state != nullptr && i < d.c; ++i) {
    for (int64_t j = 0; j < d.m; ++j) x += grad_state[i * d.m + j] * w.state[j * d.cp + i];
  }
  load_state(grad_state, d, false, w.suffix);
  if constexpr (!tile::kMerged<T>) load_state(grad_state, d, true, w.suffix_t);
  return x;
}

template <typename scalar_t, typename T>
void backward_head(const Dims& d, const Args<scalar_t, T>& a, int64_t head) {
  Workspace<T> w(d);
  const int64_t span = span_chunks(d, a);
  T x = 0;  // <R, S> at the end of the chunk the reverse sweep enters next (sweeps.h)
  for (int64_t first = (d.chunks - 1) / span * span; first >= 0; first -= span) {
    const int64_t last = std::min(first + span, d.chunks);
    const T* start = a.chunk_states == nullptr ? state_of(a.state0, d, head) : stored_state(d, a, head, first / span);
    load_state(start, d, true, w.state);
    for (int64_t chunk = first; chunk < last; ++chunk) {
      // Prefetches rows of this span only: the chunks after it are done, and the dk, dv sweep of the
      // span after it (run just before) asked for its first a.prefetch_chunks chunks.
      const int64_t ahead = chunk + a.prefetch_chunks;
      dq_chunk(d, a, head, chunk * kChunk, ahead < last ? ahead * kChunk : -1, w);
    }
    if (last == d.chunks) x = start_reverse(d, a, head, w);
    for (int64_t chunk = last - 1; chunk >= first; --chunk) x = dkdv_chunk(d, a, head, chunk * kChunk, x, w);
  }
  save_state(w.suffix, d, state_of(a.state_out, d, head));
  tile::fence();
}

template <typename scalar_t, typename T>
constexpr cpu::HeadPasses<Args, scalar_t, T> kPasses{&forward_head<scalar_t, T>, &backward_head<scalar_t, T>};

}  // namespace
}  // namespace lintf::decayed
