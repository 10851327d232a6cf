// CPU kernels of the lintf causal product (schema and semantics in ../causal_product.{cpp,h}) and
// their registration for CPU tensors. The work runs on the vector path selected at run time
// (common/cpu/path.h): its sweeps (sweeps.h, one table per ISA from vector_path.h) are scheduled on
// torch's threads by parallel.h.
#include "causal/causal_product.h"
#include "causal/cpu/parallel.h"
#include "common/cpu/output.h"
#include "common/cpu/tuning.h"

#include <ATen/Dispatch.h>

#include <cstdint>
#include <type_traits>

namespace lintf {
namespace {

using cpu::Args;
using cpu::Dims;
using cpu::output;

// Gradients (dq, dk, dv) from cpu::streamed_bytes on (4 x L2, common/cpu/tuning.h) are written with
// streaming stores (cpu::write_row): many times a core's L2, they leave the caches before anyone
// reads them, and the backward, which reads five inputs while writing three outputs, measured 8-11%
// faster without the line fetches of plain stores (B=1, H=8, N=16384, 1 and 2 threads). The
// forward's one output measured no faster streamed (2 threads: slower), so it is stored plainly and
// may stay cached for its consumer.

template <typename T>
Dims dims_of(const cpu::VectorPath& path, const at::Tensor& q, const at::Tensor& v) {
  return Dims(q.size(0) * q.size(1), q.size(2), q.size(3), v.size(3), path.col_block<T>());
}

// A contiguous view of an optional state tensor, or an undefined tensor.
at::Tensor contiguous_or_undefined(const std::optional<at::Tensor>& t) {
  return t.has_value() ? t->contiguous() : at::Tensor();
}

template <typename T>
const T* data_or_null(const at::Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}

// Kept states start every states_every positions, a whole number of the sweeps' chunks (0: none).
void check_states_every(int64_t states_every) {
  TORCH_CHECK(states_every >= 0 && states_every % cpu::kChunk == 0, "lintf::causal_product: states_every must be 0 ",
              "or a positive multiple of ", cpu::kChunk, " on the CPU, got ", states_every);
}

// Calls with an empty dimension (B*H, N, C or M) skip the kernels; what is left is cheap in ATen.
void forward_without_kernel(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double eps,
                            bool normalize, const at::Tensor& kv0, const at::Tensor& z0, at::Tensor& out,
                            at::Tensor& den, at::Tensor& kv_final, at::Tensor& z_final) {
  const auto acc = accumulation_type(v.scalar_type());
  const auto ka = k.to(acc);
  kv_final.copy_(at::matmul(ka.transpose(2, 3), v.to(acc)));  // (B, H, C, M)
  z_final.copy_(ka.sum(2));                                    // (B, H, C)
  if (kv0.defined()) kv_final.add_(kv0);
  if (z0.defined()) z_final.add_(z0);
  out.zero_();  // not empty only when C == 0: every numerator is an empty sum
  if (normalize) {
    auto prefix = ka.cumsum(2);  // (B, H, N, C): z0 + sum_{j<=i} k_j
    if (z0.defined()) prefix = prefix + z0.unsqueeze(2);
    den.copy_((q.to(acc) * prefix).sum(3) + eps);
  }
}

// The kept states of a call without values (M == 0, the only empty call whose kept states have
// elements): z0 + sum_{j < s * states_every} k_j for every span s, (B, H, spans, C).
at::Tensor key_sums_before_spans(const at::Tensor& k, const at::Tensor& z0, int64_t states_every) {
  const auto ka = k.to(accumulation_type(k.scalar_type()));
  auto sums = at::cat({at::zeros_like(ka.narrow(2, 0, 1)), ka.cumsum(2)}, 2).slice(2, 0, k.size(2), states_every);
  return z0.defined() ? sums + z0.unsqueeze(2) : sums;
}

// The backward of forward_without_kernel: only the final state's gradient reaches k, v and the initial state.
void backward_without_kernel(const at::Tensor& k, const at::Tensor& v, const at::Tensor& grad_kv,
                             const at::Tensor& grad_z, at::Tensor& dq, at::Tensor& dk, at::Tensor& dv,
                             at::Tensor& dkv0, at::Tensor& dz0) {
  const auto acc = accumulation_type(v.scalar_type());
  auto dk_acc = at::zeros(k.sizes(), k.options().dtype(acc));
  dq.zero_(), dv.zero_(), dkv0.zero_(), dz0.zero_();
  if (grad_kv.defined()) {
    dk_acc.add_(at::matmul(v.to(acc), grad_kv.transpose(2, 3)));  // (B, H, N, C)
    dv.copy_(at::matmul(k.to(acc), grad_kv));                      // (B, H, N, M)
    dkv0.copy_(grad_kv);
  }
  if (grad_z.defined()) {
    dk_acc.add_(grad_z.unsqueeze(2));
    dz0.copy_(grad_z);
  }
  dk.copy_(dk_acc);
}

}  // namespace

KeptForwardResult causal_product_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double eps,
                                     bool normalize, const std::optional<at::Tensor>& kv,
                                     const std::optional<at::Tensor>& normaliser, int64_t states_every) {
  check_inputs(q, k, v);
  check_state(kv, normaliser, q, v, "initial state");
  check_states_every(states_every);
  const cpu::VectorPath& path = cpu::selected_vector_path();
  const auto qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  const auto kv0 = contiguous_or_undefined(kv), z0 = contiguous_or_undefined(normaliser);
  auto out = output(vc.sizes(), vc.options());
  const auto acc_options = vc.options().dtype(accumulation_type(vc.scalar_type()));
  auto den = normalize ? at::empty({q.size(0), q.size(1), q.size(2)}, acc_options) : at::empty({0}, acc_options);
  auto kv_final = at::empty({q.size(0), q.size(1), q.size(3), v.size(3)}, acc_options);
  auto z_final = at::empty({q.size(0), q.size(1), q.size(3)}, acc_options);
  auto kept = kept_states_like(q, v, states_every > 0 ? cpu::ceil_div(q.size(2), states_every) : 0);
  if (q.numel() == 0 || v.numel() == 0) {
    forward_without_kernel(qc, kc, vc, eps, normalize, kv0, z0, out, den, kv_final, z_final);
    if (kept.numel() > 0) kept.copy_(key_sums_before_spans(kc, z0, states_every));
    return {out, den, kv_final, z_final, kept};
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, vc.scalar_type(), "lintf_causal_product", [&] {
    using T = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    Args<scalar_t, T> a{qc.data_ptr<scalar_t>(), kc.data_ptr<scalar_t>(), vc.data_ptr<scalar_t>()};
    a.result = out.data_ptr<scalar_t>();
    a.den_out = normalize ? den.data_ptr<T>() : nullptr;
    a.eps = static_cast<T>(eps);
    a.normalize = normalize;
    a.kv0 = data_or_null<T>(kv0), a.z0 = data_or_null<T>(z0);
    a.state_kv = kv_final.data_ptr<T>(), a.state_z = z_final.data_ptr<T>();
    if (states_every > 0) a.span_states = kept.data_ptr<T>(), a.span_chunks = states_every / cpu::kChunk;
    const auto row_bytes = cpu::causal_forward_row_bytes(q.size(3), v.size(3), vc.element_size());
    a.prefetch_chunks = cpu::prefetch_chunks(cpu::kChunk * row_bytes, cpu::cache_sizes());
    schedule::run_forward(path, dims_of<T>(path, qc, vc), a);
  });
  return {out, den, kv_final, z_final, kept};
}

BackwardResult causal_product_backward_cpu(const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
                                           const at::Tensor& v, const at::Tensor& out, const at::Tensor& denominator,
                                           bool normalize, const std::optional<at::Tensor>& kv,
                                           const std::optional<at::Tensor>& normaliser,
                                           const std::optional<at::Tensor>& grad_kv,
                                           const std::optional<at::Tensor>& grad_normaliser,
                                           const std::optional<at::Tensor>& kept_states, int64_t states_every) {
  check_inputs(q, k, v);
  check_state(kv, normaliser, q, v, "initial state");
  check_state(grad_kv, grad_normaliser, q, v, "final-state gradient");
  check_states_every(states_every);
  const bool keeps = kept_states.has_value() && kept_states->size(2) > 0;
  if (keeps) {
    const auto expected = kept_states_like(q, v, cpu::ceil_div(q.size(2), states_every)).sizes();
    TORCH_CHECK(states_every > 0 && kept_states->sizes() == expected && kept_states->is_contiguous() &&
                    kept_states->scalar_type() == accumulation_type(v.scalar_type()),
                "lintf::causal_product_backward: kept_states must be the contiguous ", expected,
                " tensor the forward returned with states_every=", states_every, ", got ", kept_states->sizes());
  }
  const cpu::VectorPath& path = cpu::selected_vector_path();
  TORCH_CHECK(grad_out.sizes() == v.sizes() && out.sizes() == v.sizes(),
              "lintf::causal_product_backward: grad_out and out must have v's shape ", v.sizes());
  const auto qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  const auto gc = grad_out.to(vc.scalar_type()).contiguous(), oc = out.to(vc.scalar_type()).contiguous();
  const auto acc = accumulation_type(vc.scalar_type());
  const auto dc = normalize ? denominator.to(acc).contiguous() : denominator;
  const auto kv0 = contiguous_or_undefined(kv), z0 = contiguous_or_undefined(normaliser);
  const auto gkv = contiguous_or_undefined(grad_kv), gz = contiguous_or_undefined(grad_normaliser);
  auto dq = output(qc.sizes(), qc.options()), dk = output(kc.sizes(), kc.options()),
       dv = output(vc.sizes(), vc.options());
  auto dkv0 = at::empty({q.size(0), q.size(1), q.size(3), v.size(3)}, vc.options().dtype(acc));
  auto dz0 = at::empty({q.size(0), q.size(1), q.size(3)}, vc.options().dtype(acc));
  // gz per position, computed once from out by the dq sweep and read back by the dk/dv sweep
  const auto saved_gz =
      normalize ? at::empty({q.size(0), q.size(1), q.size(2)}, vc.options().dtype(acc)) : at::Tensor();
  if (q.numel() == 0 || v.numel() == 0) {
    backward_without_kernel(kc, vc, gkv, gz, dq, dk, dv, dkv0, dz0);
    return {dq, dk, dv, dkv0, dz0};
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, vc.scalar_type(), "lintf_causal_product_backward", [&] {
    using T = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    Args<scalar_t, T> a{qc.data_ptr<scalar_t>(), kc.data_ptr<scalar_t>(), vc.data_ptr<scalar_t>()};
    a.grad = gc.data_ptr<scalar_t>();
    a.out = oc.data_ptr<scalar_t>();
    a.den = normalize ? dc.data_ptr<T>() : nullptr;
    a.gz = normalize ? saved_gz.data_ptr<T>() : nullptr;
    a.dq = dq.data_ptr<scalar_t>(), a.dk = dk.data_ptr<scalar_t>(), a.dv = dv.data_ptr<scalar_t>();
    a.normalize = normalize;
    const cpu::CacheSizes caches = cpu::cache_sizes();
    a.stream_outputs = static_cast<int64_t>(dq.nbytes()) >= cpu::streamed_bytes(caches);
    const auto row_bytes = cpu::causal_backward_row_bytes(q.size(3), v.size(3), vc.element_size());
    a.prefetch_chunks = cpu::prefetch_chunks(cpu::kChunk * row_bytes, caches);
    a.kv0 = data_or_null<T>(kv0), a.z0 = data_or_null<T>(z0);
    a.grad_kv = data_or_null<T>(gkv), a.grad_z = data_or_null<T>(gz);
    a.state_kv = dkv0.data_ptr<T>(), a.state_z = dz0.data_ptr<T>();
    if (keeps) a.span_states = kept_states->data_ptr<T>(), a.span_chunks = states_every / cpu::kChunk;
    schedule::run_backward(path, dims_of<T>(path, qc, vc), a);
  });
  return {dq, dk, dv, dkv0, dz0};
}

TORCH_LIBRARY_IMPL(lintf, CPU, m) {
  m.impl("causal_product", &causal_product_cpu);
  m.impl("causal_product_backward", &causal_product_backward_cpu);
}

}  // namespace lintf
