// CUDA kernels of the lintf decayed causal product (schema and semantics in ../decayed_product.{cpp,h}),
// the choice between them, and their registration for CUDA tensors.
//
//   chunked (chunk*.cuh): tensor cores, parallel over heads x chunks x value tiles; fp32 (3xTF32, or
//       TF32 when torch allows TF32 matmuls), bf16 and fp16, up to 128 features, sm_80+.
//   ATen (aten.h): batched matmuls for everything else (fp64, wider heads, older GPUs).
// Empty sizes multiply nothing: the state only decays, as on the CPU.
//
// The CUDA backward recomputes its chunk states itself: state_spacing must be 0 here (the Python side
// keeps chunk states only for a CPU backward), and chunk_states comes back empty, (B, H, 0, C, M).
#include "decayed/cuda/aten.h"
#include "decayed/cuda/chunk_launch.cuh"
#include "decayed/inputs.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <tuple>

namespace lintf {
namespace {

// TORCH_CHECKs for direct torch.ops calls (the Python wrapper raises ValueErrors first).
void check(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& log_decay,
           const std::optional<at::Tensor>& state, int64_t state_spacing, const char* state_name) {
  decayed::check_inputs(q, k, v, log_decay, state, state_name);
  TORCH_CHECK(state_spacing == 0, "lintf::decayed_product: state_spacing must be 0 on CUDA (its backward keeps ",
              "the chunk states it needs), got ", state_spacing);
}

at::Tensor contiguous_or_undefined(const std::optional<at::Tensor>& t) {
  return t.has_value() ? t->contiguous() : at::Tensor();
}

bool empty(const at::Tensor& q, const at::Tensor& v) { return q.numel() == 0 || v.numel() == 0; }

// With an empty B*H, N, C or M nothing is multiplied: a state only decays by exp(sum of log_decay).
at::Tensor decayed_whole(const at::Tensor& state, const at::Tensor& log_decay, const at::Tensor& q,
                         const at::Tensor& v) {
  if (!state.defined()) return at::zeros({q.size(0), q.size(1), q.size(3), v.size(3)}, log_decay.options());
  return state * log_decay.sum(2).exp().unsqueeze(-1).unsqueeze(-1);
}

at::Tensor no_chunk_states(const at::Tensor& q, const at::Tensor& v, const at::Tensor& log_decay) {
  return at::empty({q.size(0), q.size(1), 0, q.size(3), v.size(3)}, log_decay.options());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> decayed_product_cuda(const at::Tensor& q, const at::Tensor& k,
                                                                    const at::Tensor& v, const at::Tensor& log_decay,
                                                                    const std::optional<at::Tensor>& initial_state,
                                                                    int64_t state_spacing) {
  check(q, k, v, log_decay, initial_state, state_spacing, "initial_state");
  const c10::cuda::CUDAGuard guard(q.device());
  const auto s0 = contiguous_or_undefined(initial_state);
  const auto states = no_chunk_states(q, v, log_decay);
  if (empty(q, v)) return {at::zeros(v.sizes(), v.options()), decayed_whole(s0, log_decay, q, v), states};
  const auto dims = decayed_chunk::plan(q, v);
  const auto [out, final_state] = dims.has_value() ? decayed_chunk::forward(*dims, q, k, v, log_decay, s0)
                                                   : decayed_aten::forward(q, k, v, log_decay, s0);
  return {out, final_state, states};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> decayed_product_backward_cuda(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& log_decay, const std::optional<at::Tensor>& initial_state,
    const std::optional<at::Tensor>& grad_state, const std::optional<at::Tensor>& /*chunk_states*/,
    int64_t state_spacing) {
  check(q, k, v, log_decay, initial_state, state_spacing, "initial_state");
  check(q, k, v, log_decay, grad_state, state_spacing, "grad_state");
  TORCH_CHECK(grad_out.sizes() == v.sizes(), "lintf::decayed_product_backward: grad_out must have v's shape ",
              v.sizes(), ", got ", grad_out.sizes());
  const c10::cuda::CUDAGuard guard(q.device());
  const auto s0 = contiguous_or_undefined(initial_state), gs = contiguous_or_undefined(grad_state);
  if (empty(q, v)) {  // only the final state's gradient reaches the initial state
    return {at::zeros_like(q), at::zeros_like(k), at::zeros_like(v), at::zeros_like(log_decay),
            decayed_whole(gs, log_decay, q, v)};
  }
  const auto dims = decayed_chunk::plan(q, v);
  return dims.has_value() ? decayed_chunk::backward(*dims, grad_out, q, k, v, log_decay, s0, gs)
                          : decayed_aten::backward(grad_out, q, k, v, log_decay, s0, gs);
}

}  // namespace
}  // namespace lintf

TORCH_LIBRARY_IMPL(lintf, CUDA, m) {
  m.impl("decayed_product", &lintf::decayed_product_cuda);
  m.impl("decayed_product_backward", &lintf::decayed_product_backward_cuda);
}
