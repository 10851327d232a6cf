// The CUDA decayed product's kernels (csrc/decayed/cuda/chunk*.cuh and their host code) compiled for the
// CPU under tests/ops/causal/cuda_emulation/cuda_emulation.h, and its ATen form (aten.h), on CPU tensors.
// Python module for tests/ops/decayed/test_cuda_emulated.py.
#include <torch/extension.h>

#include "cuda_emulation.h"

#include "decayed/cuda/aten.h"
#include "decayed/cuda/chunk_launch.cuh"
#include "binding.h"

namespace {

using lintf_emulation::dims_for;
using lintf_emulation::or_undefined;
namespace decayed = lintf::decayed_chunk;

std::vector<at::Tensor> forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const at::Tensor& log_decay, const std::optional<at::Tensor>& state0) {
  lintf::check_inputs(q, k, v);
  const auto d = dims_for(decayed::plan, q, v);
  auto [out, final_state] = decayed::forward(d, q, k, v, log_decay, or_undefined(state0));
  return {out, final_state};
}

std::vector<at::Tensor> backward(const at::Tensor& grad, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const at::Tensor& log_decay, const std::optional<at::Tensor>& state0,
                                 const std::optional<at::Tensor>& grad_state) {
  const auto d = dims_for(decayed::plan, q, v);
  auto [dq, dk, dv, da, ds0] = decayed::backward(d, grad, q, k, v, log_decay, or_undefined(state0),
                                                 or_undefined(grad_state));
  return {dq, dk, dv, da, ds0};
}

std::vector<at::Tensor> aten_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const at::Tensor& log_decay, const std::optional<at::Tensor>& state0) {
  auto [out, final_state] = lintf::decayed_aten::forward(q, k, v, log_decay, or_undefined(state0));
  return {out, final_state};
}

std::vector<at::Tensor> aten_backward(const at::Tensor& grad, const at::Tensor& q, const at::Tensor& k,
                                      const at::Tensor& v, const at::Tensor& log_decay,
                                      const std::optional<at::Tensor>& state0,
                                      const std::optional<at::Tensor>& grad_state) {
  auto [dq, dk, dv, da, ds0] = lintf::decayed_aten::backward(grad, q, k, v, log_decay, or_undefined(state0),
                                                             or_undefined(grad_state));
  return {dq, dk, dv, da, ds0};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward, "chunked forward: out, final state");
  m.def("backward", &backward, "chunked backward: dq, dk, dv, d log_decay, d initial state");
  m.def("aten_forward", &aten_forward, "ATen forward: out, final state");
  m.def("aten_backward", &aten_backward, "ATen backward: dq, dk, dv, d log_decay, d initial state");
  lintf_emulation::bind_plan_and_seed(m, decayed::plan);
}
