// The schema of the lintf causal product (semantics in causal_product.h), in the one block that
// defines it. Its kernels register where they are computed: CPU in cpu/causal_product_cpu.cpp, CUDA
// in cuda/causal_product_cuda.cu; its fake, autograd and autocast rules in Python
// (lintf/ops/causal/compiled.py, the module torch imports when it needs them).
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(lintf, m) {
  m.set_python_module("lintf.ops.causal.compiled");
  m.def(
      "causal_product(Tensor q, Tensor k, Tensor v, float eps, bool normalize, Tensor? kv=None, "
      "Tensor? normaliser=None, int states_every=0) -> (Tensor, Tensor, Tensor, Tensor, Tensor)");
  m.def(
      "causal_product_backward(Tensor grad_out, Tensor q, Tensor k, Tensor v, Tensor out, "
      "Tensor denominator, bool normalize, Tensor? kv=None, Tensor? normaliser=None, Tensor? grad_kv=None, "
      "Tensor? grad_normaliser=None, Tensor? kept_states=None, int states_every=0) "
      "-> (Tensor, Tensor, Tensor, Tensor, Tensor)");
}
