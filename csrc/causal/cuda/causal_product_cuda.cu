// CUDA kernels of the lintf causal product (schema and semantics in ../causal_product.{cpp,h}), the choice
// among them, and their registration for CUDA tensors.
//
//   chunked (chunk*.cuh): tensor cores, parallel over heads x chunks x value tiles;
//       fp32 (3xTF32, or TF32 when torch allows TF32 matmuls), bf16 and fp16, up to 128 features, sm_80+.
//   scan (scan.cuh): one block per (head, 32 value columns) walks the sequence in
//       order; any dtype, features up to what one block's shared memory holds.
//   ATen (aten.h): batched matmuls for everything else (very wide heads, empty sizes).
//
// LINTF_CUDA_KERNEL=auto|chunked|scan picks the kernel (read on every call). auto: chunked wherever it
// applies, the scan for the rest (fp64, more than 128 features, GPUs before sm_80). On an H200 the chunked
// kernel was faster at every length benchmarks/causal_product_gpu.py times, one position included (its
// short-sequence table). A kernel that does not take the inputs falls back to the next (chunked -> scan
// -> ATen), so no size the CPU op accepts is refused.
#include "causal/causal_product.h"
#include "causal/cuda/aten.h"
#include "causal/cuda/chunk_launch.cuh"
#include "causal/cuda/scan.cuh"

#include <c10/cuda/CUDAGuard.h>

#include <cstdlib>
#include <string>

namespace lintf {
namespace {

enum class Kernel { kChunked, kScan, kAten };

Kernel choose(const at::Tensor& q, const at::Tensor& v, std::optional<chunk::Dims>& dims) {
  const char* env = std::getenv("LINTF_CUDA_KERNEL");
  const std::string wanted = env != nullptr && *env != '\0' ? env : "auto";
  TORCH_CHECK(wanted == "auto" || wanted == "chunked" || wanted == "scan", "lintf::causal_product (CUDA): "
              "LINTF_CUDA_KERNEL=", wanted, " is not a kernel; allowed: auto, chunked, scan");
  const int64_t n = q.size(2), c = q.size(3), m = v.size(3);
  const bool empty = q.size(0) * q.size(1) * n * c * m == 0;
  if (empty) return Kernel::kAten;
  dims = wanted == "scan" ? std::nullopt : chunk::plan(q, v);
  if (dims.has_value()) return Kernel::kChunked;
  return scan::fits(c, m, accumulation_type(v.scalar_type()), q.get_device()) ? Kernel::kScan : Kernel::kAten;
}

at::Tensor contiguous_or_undefined(const std::optional<at::Tensor>& t) {
  return t.has_value() ? t->contiguous() : at::Tensor();
}

ForwardResult forward_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double eps, bool normalize,
                           const std::optional<at::Tensor>& kv, const std::optional<at::Tensor>& normaliser) {
  check_state(kv, normaliser, q, v, "initial state");
  const c10::cuda::CUDAGuard guard(q.device());
  std::optional<chunk::Dims> dims;
  switch (choose(q, v, dims)) {
    case Kernel::kChunked:
      return chunk::forward(*dims, q, k, v, eps, normalize, contiguous_or_undefined(kv),
                            contiguous_or_undefined(normaliser));
    case Kernel::kScan: return scan::forward(q, k, v, eps, normalize, kv, normaliser);
    case Kernel::kAten: break;
  }
  return aten_path::forward(q, k, v, eps, normalize, kv, normaliser);
}

// The CUDA kernels keep the states their backward needs themselves: states_every must be 0.
void check_no_kept_states(int64_t states_every) {
  TORCH_CHECK(states_every == 0, "lintf::causal_product: states_every must be 0 on CUDA (its kernels keep the chunk ",
              "states they need), got ", states_every);
}

KeptForwardResult causal_product_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double eps,
                                      bool normalize, const std::optional<at::Tensor>& kv,
                                      const std::optional<at::Tensor>& normaliser, int64_t states_every) {
  check_inputs(q, k, v);
  check_no_kept_states(states_every);
  return without_kept_states(forward_cuda(q, k, v, eps, normalize, kv, normaliser), q, v);
}

BackwardResult causal_product_backward_cuda(const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
                                            const at::Tensor& v, const at::Tensor& out, const at::Tensor& denominator,
                                            bool normalize, const std::optional<at::Tensor>& kv,
                                            const std::optional<at::Tensor>& normaliser,
                                            const std::optional<at::Tensor>& grad_kv,
                                            const std::optional<at::Tensor>& grad_normaliser,
                                            const std::optional<at::Tensor>& /*kept_states*/, int64_t states_every) {
  check_inputs(q, k, v);
  check_no_kept_states(states_every);
  check_state(kv, normaliser, q, v, "initial state");
  check_state(grad_kv, grad_normaliser, q, v, "final-state gradient");
  TORCH_CHECK(grad_out.sizes() == v.sizes() && out.sizes() == v.sizes(),
              "lintf::causal_product_backward: grad_out and out must have v's shape ", v.sizes());
  const c10::cuda::CUDAGuard guard(q.device());
  std::optional<chunk::Dims> dims;
  switch (choose(q, v, dims)) {
    case Kernel::kChunked:
      return chunk::backward(*dims, grad_out, q, k, v, out, denominator, normalize, contiguous_or_undefined(kv),
                             contiguous_or_undefined(normaliser), contiguous_or_undefined(grad_kv),
                             contiguous_or_undefined(grad_normaliser));
    case Kernel::kScan:
      return scan::backward(grad_out, q, k, v, out, denominator, normalize, kv, normaliser, grad_kv, grad_normaliser);
    case Kernel::kAten: break;
  }
  return aten_path::backward(grad_out, q, k, v, out, denominator, normalize, kv, normaliser, grad_kv,
                             grad_normaliser);
}

}  // namespace

TORCH_LIBRARY_IMPL(lintf, CUDA, m) {
  m.impl("causal_product", &causal_product_cuda);
  m.impl("causal_product_backward", &causal_product_backward_cuda);
}

}  // namespace lintf
