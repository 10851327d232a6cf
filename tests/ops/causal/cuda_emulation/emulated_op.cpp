// The chunked CUDA causal product (csrc/causal/cuda/chunk*.cuh and its host code), compiled for
// the CPU under cuda_emulation.h: the same kernels and launches, run on CPU tensors. Python module for
// tests/ops/causal/test_cuda_emulated.py.
#include <torch/extension.h>

#include "cuda_emulation.h"

#include "causal/cuda/chunk_launch.cuh"
#include "binding.h"

namespace {

using lintf_emulation::dims_for;
using lintf_emulation::or_undefined;

std::vector<at::Tensor> forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double eps,
                                bool normalize, const std::optional<at::Tensor>& kv, const std::optional<at::Tensor>& z) {
  lintf::check_inputs(q, k, v);
  lintf::check_state(kv, z, q, v, "initial state");
  const auto d = dims_for(lintf::chunk::plan, q, v);
  auto [out, den, kv_final, z_final] = lintf::chunk::forward(d, q, k, v, eps, normalize, or_undefined(kv), or_undefined(z));
  return {out, den, kv_final, z_final};
}

std::vector<at::Tensor> backward(const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
                                 const at::Tensor& v, const at::Tensor& out, const at::Tensor& denominator,
                                 bool normalize, const std::optional<at::Tensor>& kv, const std::optional<at::Tensor>& z,
                                 const std::optional<at::Tensor>& grad_kv, const std::optional<at::Tensor>& grad_z) {
  const auto d = dims_for(lintf::chunk::plan, q, v);
  auto [dq, dk, dv, d_kv, d_z] = lintf::chunk::backward(d, grad_out, q, k, v, out, denominator, normalize,
                                                        or_undefined(kv), or_undefined(z), or_undefined(grad_kv),
                                                        or_undefined(grad_z));
  return {dq, dk, dv, d_kv, d_z};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward, "chunked forward: out, denominator, final kv, final normaliser");
  m.def("backward", &backward, "chunked backward: dq, dk, dv, d_kv, d_normaliser");
  lintf_emulation::bind_plan_and_seed(m, lintf::chunk::plan);
}
