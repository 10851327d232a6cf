// What every emulated op's Python module shares (tests/ops/<op>/...): the kernels' shared memory, optional
// tensors, the plan of the chunked kernels and the thread order's seed. Include after cuda_emulation.h and
// the kernels' host code, in the one C++ file of the module.
#pragma once

#include <torch/extension.h>

#include <optional>
#include <tuple>
#include <vector>

namespace lintf {
namespace chunk {
alignas(128) unsigned char smem[lintf_emulation::kSharedBytes];
}  // namespace chunk
}  // namespace lintf

namespace lintf_emulation {

inline at::Tensor or_undefined(const std::optional<at::Tensor>& t) {
  return t.has_value() ? t->contiguous() : at::Tensor();
}

// The dimensions plan (an op's chunk plan) gives q, v; fails where the chunked kernels do not take them.
template <typename Plan>
lintf::chunk::Dims dims_for(Plan plan, const at::Tensor& q, const at::Tensor& v) {
  const auto dims = plan(q, v);
  TORCH_CHECK(dims.has_value(), "the chunked kernels do not take q ", q.sizes(), ", v ", v.sizes(), " (", q.dtype(), ")");
  return *dims;
}

// Adds plan(q, v) -> (cp, mt, chunks, value_tiles), take_launches(), seed(seed) (the emulated threads' order) and
// set_shared_bytes(bytes) (the shared memory per block the emulated GPU reports) to m.
template <typename Plan>
void bind_plan_and_seed(pybind11::module& m, Plan plan) {
  m.def(
      "plan",
      [plan](const at::Tensor& q, const at::Tensor& v) {
        const auto d = dims_for(plan, q, v);
        return std::vector<int64_t>{d.cp, d.mt, d.chunks, d.value_tiles};
      },
      "cp, mt, chunks, value_tiles");
  m.def(
      "take_launches",
      [] {
        std::vector<std::tuple<int64_t, int, size_t>> taken;
        for (const auto& l : launches) taken.emplace_back(l.blocks, l.threads, l.shared_bytes);
        launches.clear();
        return taken;
      },
      "(blocks, threads, shared bytes) of every kernel launch since the last call, in order");
  m.def("seed", [](uint32_t seed) { scheduler.random.seed(seed); }, "order of the emulated threads");
  m.def("set_shared_bytes", [](size_t bytes) { reported_shared_bytes = bytes; },
        "the per-block shared memory the emulated GPU reports (planning only)");
}

}  // namespace lintf_emulation
