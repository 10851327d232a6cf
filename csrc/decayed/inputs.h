// Input checks of the decayed product shared by its CPU and CUDA kernels (semantics in decayed_product.h).
#pragma once

#include "common/inputs.h"

#include <optional>
#include <vector>

namespace lintf::decayed {

// TORCH_CHECKs q, k, v (common/inputs.h), log_decay (B, H, N) and, when given, a state (B, H, C, M) named
// state_name, both in the accumulation dtype on q's device (the Python wrapper raises ValueErrors first;
// these guard direct torch.ops calls).
inline void check_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& log_decay,
                         const std::optional<at::Tensor>& state, const char* state_name) {
  lintf::check_inputs(q, k, v);
  const auto acc = accumulation_type(v.scalar_type());
  TORCH_CHECK(log_decay.sizes() == q.sizes().slice(0, 3) && log_decay.scalar_type() == acc &&
                  log_decay.device() == q.device(),
              "lintf::decayed_product: log_decay must be (B, H, N) = ", q.sizes().slice(0, 3), " of dtype ", acc,
              " on ", q.device(), ", got ", log_decay.sizes(), ", ", log_decay.scalar_type(), ", ", log_decay.device());
  if (!state.has_value()) return;
  const std::vector<int64_t> shape = {q.size(0), q.size(1), q.size(3), v.size(3)};
  TORCH_CHECK(state->sizes() == at::IntArrayRef(shape) && state->scalar_type() == acc && state->device() == q.device(),
              "lintf::decayed_product: ", state_name, " must be (B, H, C, M) = ", at::IntArrayRef(shape), " of dtype ",
              acc, " on ", q.device(), ", got ", state->sizes(), ", ", state->scalar_type(), ", ", state->device());
}

}  // namespace lintf::decayed
