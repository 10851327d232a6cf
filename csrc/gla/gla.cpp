// The schema of gated linear attention (semantics in gla.h), in the one block that defines it:
//   lintf::gated_linear_attention(q, k, v, log_gate, scale, initial_state=None) -> (out, final_state)
//   lintf::gated_linear_attention_backward(grad_out, q, k, v, log_gate, scale, initial_state=None,
//       grad_state=None) -> (dq, dk, dv, d_log_gate, d_initial_state)
// Its CPU kernels register in cpu/gla_cpu.cpp; its fake, autograd and autocast rules in Python
// (lintf/ops/gla/compiled.py, the module torch imports when it needs them).
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(lintf, m) {
  m.set_python_module("lintf.ops.gla.compiled");
  m.def(
      "gated_linear_attention(Tensor q, Tensor k, Tensor v, Tensor log_gate, float scale, "
      "Tensor? initial_state=None) -> (Tensor, Tensor)");
  m.def(
      "gated_linear_attention_backward(Tensor grad_out, Tensor q, Tensor k, Tensor v, Tensor log_gate, "
      "float scale, Tensor? initial_state=None, Tensor? grad_state=None) -> (Tensor, Tensor, Tensor, Tensor, Tensor)");
}
