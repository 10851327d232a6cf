// One call of a CPU op with one (C, M) state per head (decayed product, delta rule, GLA): the checks of
// its accumulation-dtype inputs, its tensors and new outputs, and its run over heads on torch's threads.
//
// An op's kernel checks its inputs (check_inputs, then check_accumulated / check_state for what it
// takes in the accumulation dtype), makes a StateCall::forward or ::backward, handles a call with
// nothing to compute (empty()), and runs the selected path's pass with run_heads, binding its own
// tensors to its Args (state_args.h) in the function it hands over.
#pragma once

#include "common/cpu/output.h"
#include "common/cpu/state_args.h"
#include "common/inputs.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

namespace lintf::cpu {

using lintf::check_accumulated;
using lintf::check_grad_out;
using lintf::check_state;

// Points field at t's data, null for an undefined t; the element type is the field's.
template <typename P>
void point(P*& field, const at::Tensor& t) {
  field = t.defined() ? t.data_ptr<std::remove_const_t<P>>() : nullptr;
}

// The tensors of one forward or backward call, inputs made contiguous (optional ones undefined when
// absent), and its new outputs: out (forward) or dq, dk, dv (backward), in the input dtype, and
// state_out (B, H, C, M) in the accumulation dtype, zeros: the final state, or the initial state's gradient.
struct StateCall {
  at::Tensor q, k, v, state0, grad, grad_state;
  at::Tensor out, dq, dk, dv, state_out;

  static StateCall forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const std::optional<at::Tensor>& initial_state) {
    StateCall call(q, k, v, initial_state);
    call.out = output(call.v.sizes(), call.v.options());
    return call;
  }

  static StateCall backward(const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const std::optional<at::Tensor>& initial_state,
                            const std::optional<at::Tensor>& grad_state) {
    StateCall call(q, k, v, initial_state);
    call.grad = grad_out.to(call.v.scalar_type()).contiguous();
    call.grad_state = contiguous_or_undefined(grad_state);
    call.dq = output(call.q.sizes(), call.q.options());
    call.dk = output(call.k.sizes(), call.k.options());
    call.dv = output(call.v.sizes(), call.v.options());
    return call;
  }

  // With an empty B*H, N, C or M no kernel runs: the op fills its outputs itself (pass_state_through).
  bool empty() const { return q.numel() == 0 || v.numel() == 0; }

  // The outputs of an empty call of an op whose state crosses no position unchanged: zeros, and
  // state_out the initial state (forward) or the final state's gradient (backward).
  void pass_state_through() {
    for (at::Tensor* t : {&out, &dq, &dk, &dv}) {
      if (t->defined()) t->zero_();
    }
    const at::Tensor& passed = out.defined() ? state0 : grad_state;
    if (passed.defined()) state_out.copy_(passed);
  }

  // Points a's inputs, state and outputs at this call's tensors.
  template <typename scalar_t, typename T>
  void bind(StateArgs<scalar_t, T>& a) const {
    point(a.q, q), point(a.k, k), point(a.v, v), point(a.state0, state0), point(a.state_out, state_out);
    point(a.out, out), point(a.grad, grad), point(a.grad_state, grad_state);
    point(a.dq, dq), point(a.dk, dk), point(a.dv, dv);
  }

 private:
  StateCall(const at::Tensor& q_, const at::Tensor& k_, const at::Tensor& v_, const std::optional<at::Tensor>& s0)
      : q(q_.contiguous()), k(k_.contiguous()), v(v_.contiguous()), state0(contiguous_or_undefined(s0)) {
    const auto options = v.options().dtype(accumulation_type(v.scalar_type()));
    state_out = at::zeros({q.size(0), q.size(1), q.size(3), v.size(3)}, options);
  }

  static at::Tensor contiguous_or_undefined(const std::optional<at::Tensor>& t) {
    return t.has_value() ? t->contiguous() : at::Tensor();
  }
};

// Runs the selected path's forward pass (a forward call) or backward pass on every (batch, head) of
// the call in torch's threads, with the call's tensors bound to the op's Args and `bind_own(a)`
// binding the op's own (decays, gates, their gradients, scale).
template <typename Path, typename BindOwn>
void run_heads(const Path& path, const StateCall& call, const BindOwn& bind_own) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, call.v.scalar_type(), "lintf_run_heads", [&] {
    using T = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    const auto& passes = path.template kernels<scalar_t>();
    typename std::decay_t<decltype(passes)>::Arguments a{};
    call.bind(a);
    bind_own(a);
    const auto pass = call.out.defined() ? passes.forward : passes.backward;
    const Dims d(call.q.size(0) * call.q.size(1), call.q.size(2), call.q.size(3), call.v.size(3),
                 path.template col_block<T>());
    at::parallel_for(0, d.heads, 1, [&](int64_t begin, int64_t end) {
      for (int64_t head = begin; head < end; ++head) pass(d, a, head);
    });
  });
}

}  // namespace lintf::cpu
