// The chunked CUDA causal product (csrc/causal/cuda/chunk*.cuh and its host code), compiled for
// the CPU under cuda_emulation.h: the same kernels and launches, run on CPU tensors. Python module for
// tests/ops/causal/test_cuda_emulated.py.
#include <torch/extension.h>

#include "cuda_emulation.h"

#include "causal/cuda/chunk_launch.cuh"

namespace lintf {
namespace chunk {
alignas(128) unsigned char smem[lintf_emulation::kSharedBytes];
}  // namespace chunk
}  // namespace lintf

namespace {

at::Tensor or_undefined(const std::optional<at::Tensor>& t) { return t.has_value() ? t->contiguous() : at::Tensor(); }

lintf::chunk::Dims dims_for(const at::Tensor& q, const at::Tensor& v) {
  const auto dims = lintf::chunk::plan(q, v);
  TORCH_CHECK(dims.has_value(), "the chunked kernels do not take q ", q.sizes(), ", v ", v.sizes(), " (", q.dtype(), ")");
  return *dims;
}

std::vector<at::Tensor> forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double eps,
                                bool normalize, const std::optional<at::Tensor>& kv, const std::optional<at::Tensor>& z) {
  lintf::check_inputs(q, k, v);
  lintf::check_state(kv, z, q, v, "initial state");
  auto [out, den, kv_final, z_final] = lintf::chunk::forward(dims_for(q, v), q, k, v, eps, normalize, or_undefined(kv),
                                                             or_undefined(z));
  return {out, den, kv_final, z_final};
}

std::vector<at::Tensor> backward(const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
                                 const at::Tensor& v, const at::Tensor& out, const at::Tensor& denominator,
                                 bool normalize, const std::optional<at::Tensor>& kv, const std::optional<at::Tensor>& z,
                                 const std::optional<at::Tensor>& grad_kv, const std::optional<at::Tensor>& grad_z) {
  auto [dq, dk, dv, d_kv, d_z] = lintf::chunk::backward(dims_for(q, v), grad_out, q, k, v, out, denominator, normalize,
                                                        or_undefined(kv), or_undefined(z), or_undefined(grad_kv),
                                                        or_undefined(grad_z));
  return {dq, dk, dv, d_kv, d_z};
}

// (cp, mt, chunks, value_tiles) of the chunked kernels for these inputs.
std::vector<int64_t> plan(const at::Tensor& q, const at::Tensor& v) {
  const auto d = dims_for(q, v);
  return {d.cp, d.mt, d.chunks, d.value_tiles};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward, "chunked forward: out, denominator, final kv, final normaliser");
  m.def("backward", &backward, "chunked backward: dq, dk, dv, d_kv, d_normaliser");
  m.def("plan", &plan, "cp, mt, chunks, value_tiles");
  m.def("seed", [](uint32_t seed) { lintf_emulation::scheduler.random.seed(seed); }, "order of the emulated threads");
}
