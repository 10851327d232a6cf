// What the vector paths of the CPU causal product share with the code that schedules them: the raw
// pointers of one call, and the table of per-head sweeps each path fills.
//
// A vector path (AVX-512, AVX2+FMA, portable) is one translation unit,
// causal_product_<path>.cpp, that instantiates vector_path.h: sweeps.h compiled inside a target
// region (#pragma GCC target / clang attribute), exported as one VectorPath table. The rest of the
// library is compiled for the baseline ISA, takes the table of the path that runs
// (common/cpu/path.h) and runs its sweeps on the threads (parallel.h). This header is included
// first, before any target region, so its inline code and everything it includes are compiled for
// the baseline ISA in every translation unit.
#pragma once

#include "common/cpu/path.h"

namespace lintf::cpu {

// Raw pointers of one call (all tensors contiguous) and its flags.
template <typename scalar_t, typename T>
struct Args {
  const scalar_t *q, *k, *v;
  const scalar_t *grad = nullptr, *out = nullptr;  // backward only
  const T* den = nullptr;                            // backward with normalize only
  T* gz = nullptr;                                   // backward with normalize: -(g_i / den_i) . out_i
                                                     // per position, kept by the dq sweep for dk/dv
  scalar_t* result = nullptr;                        // forward only
  T* den_out = nullptr;                              // forward with normalize only
  scalar_t *dq = nullptr, *dk = nullptr, *dv = nullptr;
  const T *kv0 = nullptr, *z0 = nullptr;             // initial state (heads, C, M), (heads, C); null: zeros
  const T *grad_kv = nullptr, *grad_z = nullptr;     // backward: gradient of the final state; null: zeros
  T *state_kv = nullptr, *state_z = nullptr;         // forward: final state; backward: initial state's gradient
  T eps = 0;
  bool normalize = false;
  bool stream_outputs = false;  // backward: gradients too large for the caches, streamed past them
  int64_t prefetch_chunks = 4;  // how far ahead the sweeps prefetch (common/cpu/tuning.h)
  // The state entering every span of span_chunks chunks, (heads, spans) of (kv (C x M), z (C)):
  // written by the forward when not null, read by the backward's `spans` sweep.
  T* span_states = nullptr;
  int64_t span_chunks = 0;
};

// Internal linkage: every unit keeps its own copy, compiled for its own ISA.
namespace {

// The kept state entering span `span` of head `head` (see Args::span_states).
template <typename scalar_t, typename T>
T* span_state(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t span) {
  return a.span_states + (head * ceil_div(d.chunks, a.span_chunks) + span) * (d.c * d.m + d.c);
}

// Fills a padded state from one head's kv (C x M) and z (C), zeros for a null part: (cp x mp)
// kv, or its (mp x cp) transpose when value_major, then z.
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

// Writes the unpadded part of a (not value-major) padded state to one head's kv (C x M) and z (C).
template <typename T>
void store_state(const Dims& d, const T* state, T* kv, T* z) {
  for (int64_t c = 0; c < d.c; ++c) std::copy(state + c * d.mp, state + c * d.mp + d.m, kv + c * d.m);
  std::copy(state + d.cp * d.mp, state + d.cp * d.mp + d.c, z);
}

}  // namespace

// Which running state a sweep carries: sum k v^T (C x M) and sum k for the forward, the same
// stored value-major (M x C) for the dq sweep, sum q g^T and sum q gz for the (reverse) dk/dv sweep.
enum class StateKind { kKeyValue, kValueKey, kQueryGrad };

// The sweeps of one vector path over chunks [first, last) of one head. `state` (padded, 64-byte
// aligned, layout of the sweep's StateKind) holds the running state before the first chunk the
// sweep visits and is left holding the state after the last.
template <typename scalar_t, typename T>
struct Sweeps {
  using Fn = void (*)(const Dims&, const Args<scalar_t, T>&, int64_t head, int64_t first, int64_t last, T* state);
  // Adds the chunks' contribution to a state of the given kind (no outputs).
  void (*totals)(const Dims&, const Args<scalar_t, T>&, StateKind, int64_t head, int64_t first, int64_t last,
                 T* state);
  Fn forward;  // outputs (and denominators); kKeyValue, in order
  Fn dq;       // dq; kValueKey, in order
  Fn dkdv;     // dk and dv; kQueryGrad, from the last chunk back to the first
  Fn spans;    // dq, dk and dv from the kept span states (first: a span boundary); kQueryGrad, as dkdv
};

using VectorPath = PathTable<Sweeps>;

// The paths this library was compiled with; avx512_path and avx2_path are null off x86-64.
const VectorPath* avx512_path();
const VectorPath* avx2_path();
const VectorPath* portable_path();

// The table of the path calls run now (common/cpu/path.h).
inline const VectorPath& selected_vector_path() {
  return selected_table({avx512_path(), avx2_path(), portable_path()}, "lintf::causal_product");
}

}  // namespace lintf::cpu
