// The schema of the delta rule (semantics in delta_rule.h), in the one block that defines it:
//   lintf::delta_rule(q, k, v, beta, log_decay, scale, initial_state=None) -> (out, final_state)
//   lintf::delta_rule_backward(grad_out, q, k, v, beta, log_decay, scale, initial_state=None, grad_state=None)
//       -> (dq, dk, dv, d_beta, d_log_decay, d_initial_state)
// Its CPU kernels register in cpu/delta_rule_cpu.cpp; its fake, autograd and autocast rules in Python
// (lintf/ops/delta/compiled.py, the module torch imports when it needs them).
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(lintf, m) {
  m.set_python_module("lintf.ops.delta.compiled");
  m.def(
      "delta_rule(Tensor q, Tensor k, Tensor v, Tensor beta, Tensor? log_decay, float scale, "
      "Tensor? initial_state=None) -> (Tensor, Tensor)");
  m.def(
      "delta_rule_backward(Tensor grad_out, Tensor q, Tensor k, Tensor v, Tensor beta, Tensor? log_decay, "
      "float scale, Tensor? initial_state=None, Tensor? grad_state=None) "
      "-> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
}
