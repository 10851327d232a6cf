// CPU kernels of gated linear attention (schema and semantics in ../gla.{cpp,h}) and their
// registration for CPU tensors. Heads run in parallel on torch's threads, each on the vector path
// that runs now (common/cpu/path.h; LINTF_CPU_PATH, else the widest this CPU runs). The gates
// exp(log_gate) are computed here by ATen, once per call. The Python side (fake, autograd and
// autocast rules) is lintf/ops/gla/compiled.py.
#include "common/cpu/output.h"
#include "common/inputs.h"
#include "gla/gla.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <tuple>
#include <vector>

namespace lintf::gla {
namespace {

const Path& selected_path() {
  return cpu::selected_table({avx512_path(), avx2_path(), portable_path()}, "lintf::gated_linear_attention");
}

// TORCH_CHECKs a tensor of the accumulation dtype on q's device.
void check_accumulated(const at::Tensor& t, at::IntArrayRef shape, const at::Tensor& q, at::ScalarType acc,
                       const char* name) {
  TORCH_CHECK(t.sizes() == shape && t.scalar_type() == acc && t.device() == q.device(),
              "lintf::gated_linear_attention: ", name, " must be ", shape, " of dtype ", acc, " on ", q.device(),
              ", got ", t.sizes(), ", ", t.scalar_type(), ", ", t.device());
}

// TORCH_CHECKs for direct torch.ops calls (the Python wrapper raises ValueErrors first).
void check(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& log_gate,
           const std::optional<at::Tensor>& state, const char* state_name) {
  check_inputs(q, k, v);
  const auto acc = accumulation_type(v.scalar_type());
  check_accumulated(log_gate, q.sizes(), q, acc, "log_gate");
  const std::vector<int64_t> shape = {q.size(0), q.size(1), q.size(3), v.size(3)};
  if (state.has_value()) check_accumulated(*state, shape, q, acc, state_name);
}

at::Tensor contiguous_or_undefined(const std::optional<at::Tensor>& t) {
  return t.has_value() ? t->contiguous() : at::Tensor();
}

template <typename T>
const T* data_or_null(const at::Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}

// (B, H, C, M) state in the accumulation dtype: a copy of `like` when defined, else zeros.
at::Tensor state_from(const at::Tensor& q, const at::Tensor& v, const at::Tensor& like) {
  const auto options = v.options().dtype(accumulation_type(v.scalar_type()));
  auto state = at::zeros({q.size(0), q.size(1), q.size(3), v.size(3)}, options);
  return like.defined() ? state.copy_(like) : state;
}

template <typename scalar_t, typename T>
Args<scalar_t, T> args_of(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& gates,
                          double scale, const at::Tensor& state0, at::Tensor& state_out) {
  Args<scalar_t, T> a{q.data_ptr<scalar_t>(), k.data_ptr<scalar_t>(), v.data_ptr<scalar_t>(), gates.data_ptr<T>()};
  a.scale = static_cast<T>(scale);
  a.state0 = data_or_null<T>(state0);
  a.state_out = state_out.data_ptr<T>();
  return a;
}

// Runs one per-head pass of the selected path on every (batch, head) of q (B, H, N, C), v (B, H, N, M).
template <typename scalar_t, typename T>
void run(void (*pass)(const Dims&, const Args<scalar_t, T>&, int64_t), const Path& path, const at::Tensor& q,
         const at::Tensor& v, const Args<scalar_t, T>& a) {
  const Dims d(q.size(0) * q.size(1), q.size(2), q.size(3), v.size(3), path.col_block<T>());
  at::parallel_for(0, d.heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t head = begin; head < end; ++head) pass(d, a, head);
  });
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> gla_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                           const at::Tensor& log_gate, double scale,
                                           const std::optional<at::Tensor>& initial_state) {
  check(q, k, v, log_gate, initial_state, "initial_state");
  const Path& path = selected_path();
  const auto qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  const auto s0 = contiguous_or_undefined(initial_state);
  auto out = cpu::output(vc.sizes(), vc.options());
  if (q.numel() == 0 || v.numel() == 0) {  // no position, or an empty state: outputs are empty sums
    out.zero_();
    return {out, state_from(qc, vc, s0)};
  }
  const auto gates = log_gate.exp().contiguous();
  auto final_state = state_from(qc, vc, at::Tensor());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, vc.scalar_type(), "lintf_gla", [&] {
    using T = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    auto a = args_of<scalar_t, T>(qc, kc, vc, gates, scale, s0, final_state);
    a.out = out.data_ptr<scalar_t>();
    run<scalar_t, T>(path.kernels<scalar_t>().forward, path, qc, vc, a);
  });
  return {out, final_state};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gla_backward_cpu(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& log_gate, double scale, const std::optional<at::Tensor>& initial_state,
    const std::optional<at::Tensor>& grad_state) {
  check(q, k, v, log_gate, initial_state, "initial_state");
  check(q, k, v, log_gate, grad_state, "grad_state");
  TORCH_CHECK(grad_out.sizes() == v.sizes(), "lintf::gated_linear_attention_backward: grad_out must have v's shape ",
              v.sizes(), ", got ", grad_out.sizes());
  const Path& path = selected_path();
  const auto qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  const auto s0 = contiguous_or_undefined(initial_state), gs = contiguous_or_undefined(grad_state);
  const auto gc = grad_out.to(vc.scalar_type()).contiguous();
  auto dq = cpu::output(qc.sizes(), qc.options()), dk = cpu::output(kc.sizes(), kc.options());
  auto dv = cpu::output(vc.sizes(), vc.options()), d_log_gate = at::empty(log_gate.sizes(), log_gate.options());
  if (q.numel() == 0 || v.numel() == 0) {  // only the final state's gradient reaches the initial state
    dq.zero_(), dk.zero_(), dv.zero_(), d_log_gate.zero_();
    return {dq, dk, dv, d_log_gate, state_from(qc, vc, gs)};
  }
  const auto gates = log_gate.exp().contiguous();
  auto d_state0 = state_from(qc, vc, at::Tensor());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, vc.scalar_type(), "lintf_gla_backward", [&] {
    using T = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    auto a = args_of<scalar_t, T>(qc, kc, vc, gates, scale, s0, d_state0);
    a.grad = gc.data_ptr<scalar_t>();
    a.grad_state = data_or_null<T>(gs);
    a.dq = dq.data_ptr<scalar_t>(), a.dk = dk.data_ptr<scalar_t>(), a.dv = dv.data_ptr<scalar_t>();
    a.d_log_gate = d_log_gate.data_ptr<T>();
    run<scalar_t, T>(path.kernels<scalar_t>().backward, path, qc, vc, a);
  });
  return {dq, dk, dv, d_log_gate, d_state0};
}

}  // namespace lintf::gla

TORCH_LIBRARY_IMPL(lintf, CPU, m) {
  m.impl("gated_linear_attention", &lintf::gla::gla_cpu);
  m.impl("gated_linear_attention_backward", &lintf::gla::gla_backward_cpu);
}
