// CPU kernels of the delta rule (schema and semantics in ../delta_rule.{cpp,h}) and their
// registration for CPU tensors. Heads run in parallel on torch's threads, each on the vector path
// that runs now (common/cpu/path.h; LINTF_CPU_PATH, else the widest this CPU runs); the steps every
// op with one state per head shares are common/cpu/state_call.h. The Python side (fake, autograd and
// autocast rules) is lintf/ops/delta/compiled.py.
#include "common/cpu/state_call.h"
#include "common/cpu/tuning.h"
#include "delta/delta_rule.h"

#include <torch/library.h>

#include <tuple>

namespace lintf::delta {
namespace {

constexpr const char* kOp = "lintf::delta_rule";

const Path& selected_path() { return cpu::selected_table({avx512_path(), avx2_path(), portable_path()}, kOp); }

// TORCH_CHECKs for direct torch.ops calls (the Python wrapper raises ValueErrors first).
void check(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& beta,
           const std::optional<at::Tensor>& log_decay, const std::optional<at::Tensor>& state, const char* state_name) {
  check_inputs(q, k, v);
  const auto positions = q.sizes().slice(0, 3);  // (B, H, N)
  cpu::check_accumulated(kOp, "beta", beta, "(B, H, N)", positions, q, v);
  if (log_decay.has_value()) cpu::check_accumulated(kOp, "log_decay", *log_decay, "(B, H, N)", positions, q, v);
  cpu::check_state(kOp, state_name, state, q, v);
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> delta_rule_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                  const at::Tensor& beta, const std::optional<at::Tensor>& log_decay,
                                                  double scale, const std::optional<at::Tensor>& initial_state) {
  check(q, k, v, beta, log_decay, initial_state, "initial_state");
  auto call = cpu::StateCall::forward(q, k, v, initial_state);
  if (call.empty()) {  // no position, or an empty state: outputs are empty sums
    call.pass_state_through();
    return {call.out, call.state_out};
  }
  const auto bc = beta.contiguous(), lc = log_decay.has_value() ? log_decay->contiguous() : at::Tensor();
  cpu::run_heads(selected_path(), call, [&](auto& a) {
    cpu::point(a.beta, bc), cpu::point(a.log_decay, lc);
    a.scale = scale;
  });
  return {call.out, call.state_out};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> delta_rule_backward_cpu(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& beta,
    const std::optional<at::Tensor>& log_decay, double scale, const std::optional<at::Tensor>& initial_state,
    const std::optional<at::Tensor>& grad_state) {
  check(q, k, v, beta, log_decay, initial_state, "initial_state");
  check(q, k, v, beta, log_decay, grad_state, "grad_state");
  cpu::check_grad_out("lintf::delta_rule_backward", grad_out, v);
  auto call = cpu::StateCall::backward(grad_out, q, k, v, initial_state, grad_state);
  const auto bc = beta.contiguous(), lc = log_decay.has_value() ? log_decay->contiguous() : at::Tensor();
  auto d_beta = at::empty(bc.sizes(), bc.options());
  auto d_log_decay = lc.defined() ? at::empty(lc.sizes(), lc.options()) : at::empty({0}, bc.options());
  if (call.empty()) {  // only the final state's gradient reaches the initial state
    call.pass_state_through();
    d_beta.zero_(), d_log_decay.zero_();
    return {call.dq, call.dk, call.dv, d_beta, d_log_decay, call.state_out};
  }
  const struct Release {
    ~Release() { release_kept(); }  // the heads' kept memory, also when a head throws
  } release;
  const int64_t streamed_kept = cpu::streamed_kept_bytes(cpu::cache_sizes());
  cpu::run_heads(selected_path(), call, [&](auto& a) {
    cpu::point(a.beta, bc), cpu::point(a.log_decay, lc), cpu::point(a.d_beta, d_beta);
    cpu::point(a.d_log_decay, lc.defined() ? d_log_decay : at::Tensor());
    a.scale = scale;
    a.streamed_kept_bytes = streamed_kept;
  });
  return {call.dq, call.dk, call.dv, d_beta, d_log_decay, call.state_out};
}

}  // namespace lintf::delta

TORCH_LIBRARY_IMPL(lintf, CPU, m) {
  m.impl("delta_rule", &lintf::delta::delta_rule_cpu);
  m.impl("delta_rule_backward", &lintf::delta::delta_rule_backward_cpu);
}
