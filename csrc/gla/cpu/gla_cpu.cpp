// CPU kernels of gated linear attention (schema and semantics in ../gla.{cpp,h}) and their
// registration for CPU tensors. Heads run in parallel on torch's threads, each on the vector path
// that runs now (common/cpu/path.h; LINTF_CPU_PATH, else the widest this CPU runs); the steps every
// op with one state per head shares are common/cpu/state_call.h. The gates exp(log_gate) are
// computed here by ATen, once per call. The Python side (fake, autograd and autocast rules) is
// lintf/ops/gla/compiled.py.
#include "common/cpu/state_call.h"
#include "gla/gla.h"

#include <torch/library.h>

#include <tuple>

namespace lintf::gla {
namespace {

constexpr const char* kOp = "lintf::gated_linear_attention";

const Path& selected_path() { return cpu::selected_table({avx512_path(), avx2_path(), portable_path()}, kOp); }

// TORCH_CHECKs for direct torch.ops calls (the Python wrapper raises ValueErrors first).
void check(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& log_gate,
           const std::optional<at::Tensor>& state, const char* state_name) {
  check_inputs(q, k, v);
  cpu::check_accumulated(kOp, "log_gate", log_gate, "(B, H, N, C)", q.sizes(), q, v);
  cpu::check_state(kOp, state_name, state, q, v);
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> gla_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                           const at::Tensor& log_gate, double scale,
                                           const std::optional<at::Tensor>& initial_state) {
  check(q, k, v, log_gate, initial_state, "initial_state");
  auto call = cpu::StateCall::forward(q, k, v, initial_state);
  if (call.empty()) {  // no position, or an empty state: outputs are empty sums
    call.pass_state_through();
    return {call.out, call.state_out};
  }
  const auto gates = log_gate.exp().contiguous();
  cpu::run_heads(selected_path(), call, [&](auto& a) { cpu::point(a.gates, gates), a.scale = scale; });
  return {call.out, call.state_out};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gla_backward_cpu(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& log_gate, double scale, const std::optional<at::Tensor>& initial_state,
    const std::optional<at::Tensor>& grad_state) {
  check(q, k, v, log_gate, initial_state, "initial_state");
  check(q, k, v, log_gate, grad_state, "grad_state");
  cpu::check_grad_out("lintf::gated_linear_attention_backward", grad_out, v);
  auto call = cpu::StateCall::backward(grad_out, q, k, v, initial_state, grad_state);
  auto d_log_gate = at::empty(log_gate.sizes(), log_gate.options());
  if (call.empty()) {  // only the final state's gradient reaches the initial state
    call.pass_state_through();
    d_log_gate.zero_();
    return {call.dq, call.dk, call.dv, d_log_gate, call.state_out};
  }
  const auto gates = log_gate.exp().contiguous();
  cpu::run_heads(selected_path(), call, [&](auto& a) {
    cpu::point(a.gates, gates), cpu::point(a.d_log_gate, d_log_gate);
    a.scale = scale;
  });
  return {call.dq, call.dk, call.dv, d_log_gate, call.state_out};
}

}  // namespace lintf::gla

TORCH_LIBRARY_IMPL(lintf, CPU, m) {
  m.impl("gated_linear_attention", &lintf::gla::gla_cpu);
  m.impl("gated_linear_attention_backward", &lintf::gla::gla_backward_cpu);
}
