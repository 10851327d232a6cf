// The CUDA gated linear attention's kernels (csrc/gla/cuda/chunk*.cuh and their host code) compiled for the
// CPU under tests/ops/causal/cuda_emulation/cuda_emulation.h, on CPU tensors. Python module for
// tests/ops/gla/test_cuda_emulated.py.
#include <torch/extension.h>

#include "cuda_emulation.h"

#include "gla/cuda/chunk_launch.cuh"
#include "binding.h"

namespace {

using lintf_emulation::dims_for;
using lintf_emulation::or_undefined;
namespace gla = lintf::gla_chunk;

std::vector<at::Tensor> forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const at::Tensor& log_gate, double scale, const std::optional<at::Tensor>& state0) {
  lintf::check_inputs(q, k, v);
  const auto d = dims_for(gla::plan, q, v);
  auto [out, final_state] = gla::forward(d, q, k, v, log_gate, scale, or_undefined(state0));
  return {out, final_state};
}

std::vector<at::Tensor> backward(const at::Tensor& grad, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const at::Tensor& log_gate, double scale, const std::optional<at::Tensor>& state0,
                                 const std::optional<at::Tensor>& grad_state) {
  const auto d = dims_for(gla::plan, q, v);
  auto [dq, dk, dv, dg, ds0] = gla::backward(d, grad, q, k, v, log_gate, scale, or_undefined(state0),
                                             or_undefined(grad_state));
  return {dq, dk, dv, dg, ds0};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward, "chunked forward: out, final state");
  m.def("backward", &backward, "chunked backward: dq, dk, dv, d log_gate, d initial state");
  lintf_emulation::bind_plan_and_seed(m, gla::plan);
}
