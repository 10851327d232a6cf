// The CUDA decayed product's kernels (csrc/decayed/cuda/chunk*.cuh and their host code) compiled for the
// CPU under tests/ops/causal/cuda_emulation/cuda_emulation.h, and its ATen form (aten.h), on CPU tensors.
// Python module for tests/ops/decayed/test_cuda_emulated.py.
#include <torch/extension.h>

#include "cuda_emulation.h"

#include "decayed/cuda/aten.h"
#include "decayed/cuda/chunk_launch.cuh"

namespace lintf {
namespace chunk {
alignas(128) unsigned char smem[lintf_emulation::kSharedBytes];
}  // namespace chunk
}  // namespace lintf

namespace {

namespace decayed = lintf::decayed_chunk;

at::Tensor or_undefined(const std::optional<at::Tensor>& t) { return t.has_value() ? t->contiguous() : at::Tensor(); }

decayed::Dims dims_for(const at::Tensor& q, const at::Tensor& v) {
  const auto dims = decayed::plan(q, v);
  TORCH_CHECK(dims.has_value(), "the chunked kernels do not take q ", q.sizes(), ", v ", v.sizes(), " (", q.dtype(), ")");
  return *dims;
}

std::vector<at::Tensor> forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const at::Tensor& log_decay, const std::optional<at::Tensor>& state0) {
  lintf::check_inputs(q, k, v);
  auto [out, final_state] = decayed::forward(dims_for(q, v), q, k, v, log_decay, or_undefined(state0));
  return {out, final_state};
}

std::vector<at::Tensor> backward(const at::Tensor& grad, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const at::Tensor& log_decay, const std::optional<at::Tensor>& state0,
                                 const std::optional<at::Tensor>& grad_state) {
  auto [dq, dk, dv, da, ds0] = decayed::backward(dims_for(q, v), grad, q, k, v, log_decay, or_undefined(state0),
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

// (cp, mt, chunks, value_tiles) of the chunked kernels for these inputs.
std::vector<int64_t> plan(const at::Tensor& q, const at::Tensor& v) {
  const auto d = dims_for(q, v);
  return {d.cp, d.mt, d.chunks, d.value_tiles};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward, "chunked forward: out, final state");
  m.def("backward", &backward, "chunked backward: dq, dk, dv, d log_decay, d initial state");
  m.def("aten_forward", &aten_forward, "ATen forward: out, final state");
  m.def("aten_backward", &aten_backward, "ATen backward: dq, dk, dv, d log_decay, d initial state");
  m.def("plan", &plan, "cp, mt, chunks, value_tiles");
  m.def("seed", [](uint32_t seed) { lintf_emulation::scheduler.random.seed(seed); }, "order of the emulated threads");
}
