// The CUDA delta rule (its sweeps csrc/delta/cuda/sweeps.cuh under tests/ops/causal/cuda_emulation/cuda_emulation.h,
// its ATen part csrc/delta/cuda/aten.h on CPU tensors, and the host code joining them). Python module for
// tests/ops/delta/test_cuda_emulated.py.
#include <torch/extension.h>

#include "cuda_emulation.h"

#include "delta/cuda/chunk_launch.cuh"
#include "binding.h"

namespace {

using lintf_emulation::dims_for;
using lintf_emulation::or_undefined;
namespace delta = lintf::delta_cuda;

std::vector<at::Tensor> forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& beta,
                                const std::optional<at::Tensor>& log_decay, double scale,
                                const std::optional<at::Tensor>& state0) {
  lintf::check_inputs(q, k, v);
  const auto d = dims_for(delta::plan, q, v);
  auto [out, final_state] = delta::forward(d, q, k, v, beta, log_decay, scale, or_undefined(state0));
  return {out, final_state};
}

std::vector<at::Tensor> backward(const at::Tensor& grad, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const at::Tensor& beta, const std::optional<at::Tensor>& log_decay, double scale,
                                 const std::optional<at::Tensor>& state0,
                                 const std::optional<at::Tensor>& grad_state) {
  const auto d = dims_for(delta::plan, q, v);
  auto [dq, dk, dv, db, dd, ds0] = delta::backward(d, grad, q, k, v, beta, log_decay, scale, or_undefined(state0),
                                                   or_undefined(grad_state));
  return {dq, dk, dv, db, dd, ds0};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward, "forward: out, final state");
  m.def("backward", &backward, "backward: dq, dk, dv, d beta, d log_decay, d initial state");
  lintf_emulation::bind_plan_and_seed(m, delta::plan);
}
