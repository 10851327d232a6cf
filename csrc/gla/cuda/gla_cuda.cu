// CUDA kernels of gated linear attention (schema and semantics in ../gla.{cpp,h}) and their registration for
// CUDA tensors: the chunked tensor-core kernels of chunk*.cuh, fp32 (3xTF32, or TF32 when torch allows TF32
// matmuls), bf16 and fp16, up to 128 features, sm_80+. Other inputs (fp64, wider heads, older GPUs) are
// refused here; the Python entry point (lintf/ops/gla/product.py) runs them on its PyTorch path.
// Empty sizes multiply nothing: the state only decays, as on the CPU.
#include "gla/cuda/chunk_launch.cuh"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <tuple>

namespace lintf {
namespace {

constexpr const char* kOp = "lintf::gated_linear_attention";

// TORCH_CHECKs for direct torch.ops calls (the Python wrapper raises ValueErrors first).
void check(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& log_gate,
           const std::optional<at::Tensor>& state, const char* state_name) {
  check_inputs(q, k, v);
  check_accumulated(kOp, "log_gate", log_gate, "(B, H, N, C)", q.sizes(), q, v);
  check_state(kOp, state_name, state, q, v);
}

at::Tensor contiguous_or_undefined(const std::optional<at::Tensor>& t) {
  return t.has_value() ? t->contiguous() : at::Tensor();
}

bool empty(const at::Tensor& q, const at::Tensor& v) { return q.numel() == 0 || v.numel() == 0; }

// With an empty B*H, N, C or M nothing is multiplied: each state row only decays by exp(sum of its log-gates).
at::Tensor decayed_whole(const at::Tensor& state, const at::Tensor& log_gate, const at::Tensor& q,
                         const at::Tensor& v) {
  if (!state.defined()) return at::zeros({q.size(0), q.size(1), q.size(3), v.size(3)}, log_gate.options());
  return state * log_gate.sum(2).exp().unsqueeze(-1);
}

gla_chunk::Dims planned(const at::Tensor& q, const at::Tensor& v) {
  const auto dims = gla_chunk::plan(q, v);
  TORCH_CHECK(dims.has_value(), kOp, " (CUDA): the chunked kernels take float32, float16 and bfloat16 with at most ",
              chunk::kMaxFeatures, " features on compute capability 8.0 or newer, as far as this GPU's shared memory ",
              "per block allows; got ", q.scalar_type(), " with ", q.size(3), " features and ", v.size(3),
              " value columns (lintf.ops.gated_linear_attention runs other inputs on its PyTorch path)");
  return *dims;
}

// Whether the kernels take heads of c features and m value columns of dtype on device (the Python routing asks).
bool gla_cuda_takes(c10::Device device, c10::ScalarType dtype, int64_t c, int64_t m) {
  return chunk::plan_shape<gla_chunk::StateLayout, gla_chunk::OutputLayout, gla_chunk::DqLayout,
                           gla_chunk::DkvLayout>(dtype, 1, 1, c, m, device.index()).has_value();
}

std::tuple<at::Tensor, at::Tensor> gla_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                            const at::Tensor& log_gate, double scale,
                                            const std::optional<at::Tensor>& initial_state) {
  check(q, k, v, log_gate, initial_state, "initial_state");
  const c10::cuda::CUDAGuard guard(q.device());
  const auto s0 = contiguous_or_undefined(initial_state);
  if (empty(q, v)) return {at::zeros(v.sizes(), v.options()), decayed_whole(s0, log_gate, q, v)};
  return gla_chunk::forward(planned(q, v), q, k, v, log_gate, scale, s0);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gla_backward_cuda(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& log_gate, double scale, const std::optional<at::Tensor>& initial_state,
    const std::optional<at::Tensor>& grad_state) {
  check(q, k, v, log_gate, initial_state, "initial_state");
  check(q, k, v, log_gate, grad_state, "grad_state");
  check_grad_out("lintf::gated_linear_attention_backward", grad_out, v);
  const c10::cuda::CUDAGuard guard(q.device());
  const auto s0 = contiguous_or_undefined(initial_state), gs = contiguous_or_undefined(grad_state);
  if (empty(q, v)) {  // only the final state's gradient reaches the initial state
    return {at::zeros_like(q), at::zeros_like(k), at::zeros_like(v), at::zeros_like(log_gate),
            decayed_whole(gs, log_gate, q, v)};
  }
  return gla_chunk::backward(planned(q, v), grad_out, q, k, v, log_gate, scale, s0, gs);
}

}  // namespace
}  // namespace lintf

TORCH_LIBRARY_FRAGMENT(lintf, m) {
  m.def("gated_linear_attention_cuda_takes(Device device, ScalarType dtype, int c, int m) -> bool",
        &lintf::gla_cuda_takes);
}

TORCH_LIBRARY_IMPL(lintf, CUDA, m) {
  m.impl("gated_linear_attention", &lintf::gla_cuda);
  m.impl("gated_linear_attention_backward", &lintf::gla_backward_cuda);
}
