// CUDA kernels of the delta rule (schema and semantics in ../delta_rule.{cpp,h}) and their registration for CUDA
// tensors: per-chunk kernels for each chunk's WY form and the outputs (chunk.cuh), the backward sweep's operands
// (backward_operands.cuh) and the per-row gradient terms (row_terms.cuh), the state passes as sequential
// fp32 tensor-core sweeps (sweeps.cuh), dq, dk, dv batched over all chunks in ATen (aten.h); fp32, bf16 and
// fp16 inputs, up to 128 features, sm_80+. Other inputs (fp64, wider heads, older GPUs) are refused here; the
// Python entry point (lintf/ops/delta/rule.py) runs them on its PyTorch path. Empty sizes multiply nothing: the
// state only decays.
#include "delta/cuda/chunk_launch.cuh"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <tuple>

namespace lintf {
namespace {

constexpr const char* kOp = "lintf::delta_rule";

// TORCH_CHECKs for direct torch.ops calls (the Python wrapper raises ValueErrors first).
void check(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& beta,
           const std::optional<at::Tensor>& log_decay, const std::optional<at::Tensor>& state, const char* state_name) {
  check_inputs(q, k, v);
  const auto positions = q.sizes().slice(0, 3);  // (B, H, N)
  check_accumulated(kOp, "beta", beta, "(B, H, N)", positions, q, v);
  if (log_decay.has_value()) check_accumulated(kOp, "log_decay", *log_decay, "(B, H, N)", positions, q, v);
  check_state(kOp, state_name, state, q, v);
}

at::Tensor contiguous_or_undefined(const std::optional<at::Tensor>& t) {
  return t.has_value() ? t->contiguous() : at::Tensor();
}

bool empty(const at::Tensor& q, const at::Tensor& v) { return q.numel() == 0 || v.numel() == 0; }

// With an empty B*H, N, C or M nothing is written: a state only decays by exp(sum of log_decay).
at::Tensor decayed_whole(const at::Tensor& state, const std::optional<at::Tensor>& log_decay, const at::Tensor& q,
                         const at::Tensor& v, const at::Tensor& beta) {
  if (!state.defined()) return at::zeros({q.size(0), q.size(1), q.size(3), v.size(3)}, beta.options());
  return log_decay.has_value() ? state * log_decay->sum(2).exp().unsqueeze(-1).unsqueeze(-1) : state.clone();
}

chunk::Dims planned(const at::Tensor& q, const at::Tensor& v) {
  const auto dims = delta_cuda::plan(q, v);
  TORCH_CHECK(dims.has_value(), kOp, " (CUDA): its kernels take float32, float16 and bfloat16 with at most ",
              chunk::kMaxFeatures, " features on compute capability 8.0 or newer, as far as this GPU's shared memory ",
              "per block allows; got ", q.scalar_type(), " with ", q.size(3), " features and ", v.size(3),
              " value columns (lintf.ops.delta_rule runs other inputs on its PyTorch path)");
  return *dims;
}

// Whether the kernels take heads of c features and m value columns of dtype on device (the Python routing asks).
bool delta_rule_cuda_takes(c10::Device device, c10::ScalarType dtype, int64_t c, int64_t m) {
  return delta_cuda::plan_shape(dtype, 1, 1, c, m, device.index()).has_value();
}

std::tuple<at::Tensor, at::Tensor> delta_rule_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                   const at::Tensor& beta, const std::optional<at::Tensor>& log_decay,
                                                   double scale, const std::optional<at::Tensor>& initial_state) {
  check(q, k, v, beta, log_decay, initial_state, "initial_state");
  const c10::cuda::CUDAGuard guard(q.device());
  const auto s0 = contiguous_or_undefined(initial_state);
  if (empty(q, v)) return {at::zeros(v.sizes(), v.options()), decayed_whole(s0, log_decay, q, v, beta)};
  return delta_cuda::forward(planned(q, v), q, k, v, beta, log_decay, scale, s0);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> delta_rule_backward_cuda(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& beta,
    const std::optional<at::Tensor>& log_decay, double scale, const std::optional<at::Tensor>& initial_state,
    const std::optional<at::Tensor>& grad_state) {
  check(q, k, v, beta, log_decay, initial_state, "initial_state");
  check(q, k, v, beta, log_decay, grad_state, "grad_state");
  check_grad_out("lintf::delta_rule_backward", grad_out, v);
  const c10::cuda::CUDAGuard guard(q.device());
  const auto s0 = contiguous_or_undefined(initial_state), gs = contiguous_or_undefined(grad_state);
  if (empty(q, v)) {  // only the final state's gradient reaches the initial state
    const auto d_log_decay = log_decay.has_value() ? at::zeros_like(*log_decay) : at::empty({0}, beta.options());
    return {at::zeros_like(q), at::zeros_like(k), at::zeros_like(v), at::zeros_like(beta), d_log_decay,
            decayed_whole(gs, log_decay, q, v, beta)};
  }
  return delta_cuda::backward(planned(q, v), grad_out, q, k, v, beta, log_decay, scale, s0, gs);
}

}  // namespace
}  // namespace lintf

TORCH_LIBRARY_FRAGMENT(lintf, m) {
  m.def("delta_rule_cuda_takes(Device device, ScalarType dtype, int c, int m) -> bool", &lintf::delta_rule_cuda_takes);
}

TORCH_LIBRARY_IMPL(lintf, CUDA, m) {
  m.impl("delta_rule", &lintf::delta_rule_cuda);
  m.impl("delta_rule_backward", &lintf::delta_rule_backward_cuda);
}
