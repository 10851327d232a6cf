// The schema of the decayed causal product (semantics in decayed_product.h), in the one block that
// defines it:
//   lintf::decayed_product(q, k, v, log_decay, initial_state=None, state_spacing=0)
//       -> (out, final_state, chunk_states)
//   lintf::decayed_product_backward(grad_out, q, k, v, log_decay, initial_state=None, grad_state=None,
//       chunk_states=None, state_spacing=0) -> (dq, dk, dv, d_log_decay, d_initial_state)
// state_spacing 0 keeps no states (chunk_states (B, H, 0, C, M)); a multiple of 32 keeps the state
// entering every span of that many positions, which the backward then starts from.
// Its CPU kernels register in cpu/decayed_product_cpu.cpp; its fake and autograd rules in Python
// (lintf/ops/decayed/compiled.py, the module torch imports when it needs them).
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(lintf, m) {
  m.set_python_module("lintf.ops.decayed.compiled");
  m.def(
      "decayed_product(Tensor q, Tensor k, Tensor v, Tensor log_decay, Tensor? initial_state=None, "
      "int state_spacing=0) -> (Tensor, Tensor, Tensor)");
  m.def(
      "decayed_product_backward(Tensor grad_out, Tensor q, Tensor k, Tensor v, Tensor log_decay, "
      "Tensor? initial_state=None, Tensor? grad_state=None, Tensor? chunk_states=None, int state_spacing=0) "
      "-> (Tensor, Tensor, Tensor, Tensor, Tensor)");
}
