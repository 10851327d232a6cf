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
};

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
