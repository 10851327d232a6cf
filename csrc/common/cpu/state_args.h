// What the CPU ops with one (C, M) state per head (decayed product, delta rule, GLA) declare alike: the
// raw pointers of one call that they all take, and the table of their per-head passes.
//
// An op's Args<scalar_t, T> derives from StateArgs<scalar_t, T> and adds its own tensors (decays,
// gates, beta) and their gradients; its passes are HeadPasses over those Args, and its Path the
// HeadPath of them, a PathTable (path.h). Included by the op's header, inside and outside target regions.
#pragma once

#include "common/cpu/path.h"

#include <cstdint>

namespace lintf::cpu {

// Raw pointers of one call, all tensors contiguous; per head: q, k, dq, dk (n, c), v, out, grad, dv
// (n, m), states (c, m). Inputs of scalar_t, states in the accumulation type T.
template <typename scalar_t, typename T>
struct StateArgs {
  const scalar_t *q = nullptr, *k = nullptr, *v = nullptr;
  const T* state0 = nullptr;       // initial state; null: zeros
  scalar_t* out = nullptr;         // forward
  T* state_out = nullptr;          // forward: final state; backward: the initial state's gradient
  const scalar_t* grad = nullptr;  // backward: gradient of out
  const T* grad_state = nullptr;   // backward: gradient of the final state; null: zeros
  scalar_t *dq = nullptr, *dk = nullptr, *dv = nullptr;
};

// The per-head passes of one vector path and input dtype of an op whose call takes Args<scalar_t, T>.
template <template <typename, typename> class Args, typename scalar_t, typename T>
struct HeadPasses {
  using Arguments = Args<scalar_t, T>;
  void (*forward)(const Dims&, const Arguments&, int64_t head);
  void (*backward)(const Dims&, const Arguments&, int64_t head);
};

// HeadPasses over Args as the template of two types (scalar_t, T) a PathTable takes.
template <template <typename, typename> class Args>
struct PassesOver {
  template <typename scalar_t, typename T>
  using Passes = HeadPasses<Args, scalar_t, T>;
};

// The table of one vector path of an op whose call takes Args<scalar_t, T>.
template <template <typename, typename> class Args>
using HeadPath = PathTable<PassesOver<Args>::template Passes>;

}  // namespace lintf::cpu
