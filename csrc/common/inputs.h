// Input checks and the accumulation dtype that every lintf op shares (causal and decayed products,
// CPU and CUDA kernels).
#pragma once

#include <ATen/ATen.h>

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

}  // namespace lintf
