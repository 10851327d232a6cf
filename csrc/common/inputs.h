// Input checks and the accumulation dtype that every lintf op shares (CPU and CUDA kernels): q, k, v, the
// inputs taken in the accumulation dtype (decays, gates, states) and the gradient of the output.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <vector>

namespace lintf {

// TORCH_CHECKs the shapes, dtypes and devices of q, k (B, H, N, C) and v (B, H, N, M) (the Python
// wrappers raise friendlier ValueErrors first; these guard direct torch.ops.lintf calls).
inline void check_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
              "lintf::causal_product: q, k, v must be 4-D (B, H, N, features), got ", q.sizes(), ", ",
              k.sizes(), ", ", v.sizes());
  TORCH_CHECK(q.sizes() == k.sizes(), "lintf::causal_product: q and k must have the same shape, got ",
              q.sizes(), " and ", k.sizes());
  TORCH_CHECK(v.size(0) == q.size(0) && v.size(1) == q.size(1) && v.size(2) == q.size(2),
              "lintf::causal_product: v must be (B, H, N, M) with (B, H, N) as in q, got ", v.sizes(),
              " for q ", q.sizes());
  TORCH_CHECK(q.scalar_type() == k.scalar_type() && q.scalar_type() == v.scalar_type(),
              "lintf::causal_product: q, k, v must share a dtype, got ", q.scalar_type(), ", ",
              k.scalar_type(), ", ", v.scalar_type());
  TORCH_CHECK(q.device() == k.device() && q.device() == v.device(),
              "lintf::causal_product: q, k, v must be on one device, got ", q.device(), ", ", k.device(),
              ", ", v.device());
  const auto dtype = q.scalar_type();
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kDouble || dtype == at::kHalf || dtype == at::kBFloat16,
              "lintf::causal_product: dtype ", dtype, " is not supported; allowed: float16, bfloat16, "
              "float32, float64");
}

inline at::ScalarType accumulation_type(at::ScalarType dtype) {
  return dtype == at::kDouble ? at::kDouble : at::kFloat;
}

// TORCH_CHECKs that t, an input of op the call takes in the accumulation dtype of v, is `layout`
// ("(B, H, N)") = shape, of that dtype and on q's device (the Python wrappers raise ValueErrors first).
inline void check_accumulated(const char* op, const char* name, const at::Tensor& t, const char* layout,
                              at::IntArrayRef shape, const at::Tensor& q, const at::Tensor& v) {
  const auto acc = accumulation_type(v.scalar_type());
  TORCH_CHECK(t.sizes() == shape && t.scalar_type() == acc && t.device() == q.device(), op, ": ", name, " must be ",
              layout, " = ", shape, " of dtype ", acc, " on ", q.device(), ", got ", t.sizes(), ", ",
              t.scalar_type(), ", ", t.device());
}

// TORCH_CHECKs an optional (B, H, C, M) state of op (the initial state, the final state's gradient).
inline void check_state(const char* op, const char* name, const std::optional<at::Tensor>& state,
                        const at::Tensor& q, const at::Tensor& v) {
  if (!state.has_value()) return;
  const std::vector<int64_t> shape = {q.size(0), q.size(1), q.size(3), v.size(3)};
  check_accumulated(op, name, *state, "(B, H, C, M)", shape, q, v);
}

// TORCH_CHECKs the gradient of a backward op's output against v.
inline void check_grad_out(const char* backward_op, const at::Tensor& grad_out, const at::Tensor& v) {
  TORCH_CHECK(grad_out.sizes() == v.sizes(), backward_op, ": grad_out must have v's shape ", v.sizes(), ", got ",
              grad_out.sizes());
}

}  // namespace lintf
