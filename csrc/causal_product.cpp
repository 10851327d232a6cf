// CPU kernels of the lintf causal product and the TORCH_LIBRARY registration of its schema.
//
// Forward, per chunk of kChunk positions with running state S = sum_j k_j v_j^T, z = sum_j k_j:
//   out = tril(Q K^T) V + Q S,  den = rowsum(tril(Q K^T)) + Q z + eps,  then S += K^T V, z += K^T 1.
// Backward (paper eq. 13-15, normaliser folded in as an all-ones value column whose gradient is
// gz): a forward sweep gives dq from the prefix state S (kept value-major, S^T, so G S^T needs no
// transpose), a reverse sweep gives dk and dv from the suffix state R = sum_i q_i g_i^T,
// r = sum_i q_i gz_i. Both sweeps keep only O(C M) state per thread, so memory beyond inputs,
// outputs and gradients does not grow with N.
// An initial state (S0, z0) is where the forward and dq sweeps start instead of zeros; the reverse
// sweep starts from the gradient of the final state (its effect on dk and dv is exactly that of
// later positions) and ends holding the gradient of the initial state.
// Heads run in parallel; with fewer heads than threads each head is also cut into segments whose
// starting states come from a cheap state-only pass (segment_states).
#include "causal_product.h"
#include "causal_product_cpu.h"

#include <ATen/Dispatch.h>

#include <type_traits>
#include <vector>

namespace lintf {
namespace {

using cpu::Dims;
using cpu::kChunk;
using cpu::Workspace;
using tile::Shape;

// Raw pointers of one call (all tensors contiguous) and its flags.
template <typename scalar_t, typename T>
struct Args {
  const scalar_t *q, *k, *v;
  const scalar_t *grad = nullptr, *out = nullptr;  // backward only
  const T* den = nullptr;                            // backward with normalize only
  scalar_t* result = nullptr;                        // forward only
  T* den_out = nullptr;                              // forward with normalize only
  scalar_t *dq = nullptr, *dk = nullptr, *dv = nullptr;
  const T *kv0 = nullptr, *z0 = nullptr;             // initial state (heads, C, M), (heads, C); null: zeros
  const T *grad_kv = nullptr, *grad_z = nullptr;     // backward: gradient of the final state; null: zeros
  T *state_kv = nullptr, *state_z = nullptr;         // forward: final state; backward: initial state's gradient
  T eps = 0;
  bool normalize = false;
};

// Rows [t0, ...) of one head of a contiguous (heads, n, width) tensor.
template <typename P>
P* rows_of(P* base, const Dims& d, int64_t head, int64_t t0, int64_t width) {
  return base == nullptr ? nullptr : base + (head * d.n + t0) * width;
}

// Prefetches rows [t0, t0 + kChunk) of head `head` (if inside the sequence) of the given inputs.
template <typename scalar_t, typename T>
void prefetch_chunk(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t t0, bool grads) {
  if (t0 < 0 || t0 >= d.n) return;
  const int64_t rows = std::min(kChunk, d.n - t0);
  cpu::prefetch(rows_of(a.q, d, head, t0, d.c), rows * d.c);
  cpu::prefetch(rows_of(a.k, d, head, t0, d.c), rows * d.c);
  cpu::prefetch(rows_of(a.v, d, head, t0, d.m), rows * d.m);
  if (grads) {
    cpu::prefetch(rows_of(a.grad, d, head, t0, d.m), rows * d.m);
    if (a.normalize) cpu::prefetch(rows_of(a.out, d, head, t0, d.m), rows * d.m);
  }
}

// Runs fn(head, segment) over all work items, in parallel, one item per grain.
template <typename Fn>
void for_each_segment(const Dims& d, const Fn& fn) {
  at::parallel_for(0, d.heads * d.segments, 1, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) fn(item / d.segments, item % d.segments);
  });
}

// Which running state a segment hands on: sum k v^T (C x M) and sum k for the forward, the same
// stored value-major (M x C) for the dq sweep, sum q g^T and sum q gz for the dk/dv sweep.
enum class StateKind { kKeyValue, kValueKey, kQueryGrad };

// The state a sweep of `kind` holds before its first position, for one head: the initial state
// (kKeyValue, kValueKey) or the final state's gradient (kQueryGrad, a reverse sweep).
template <typename scalar_t, typename T>
void boundary_state(const Dims& d, const Args<scalar_t, T>& a, StateKind kind, int64_t head, T* state) {
  const bool reverse = kind == StateKind::kQueryGrad;
  const T* kv = reverse ? a.grad_kv : a.kv0;
  const T* z = reverse ? a.grad_z : a.z0;
  cpu::load_state(d, kv == nullptr ? nullptr : kv + head * d.c * d.m, z == nullptr ? nullptr : z + head * d.c,
                  kind == StateKind::kValueKey, state);
}

// States each segment starts from, (heads, segments, state_size): the boundary state plus the
// exclusive prefix (suffix for kQueryGrad) of the per-segment totals.
template <typename scalar_t, typename T>
std::vector<T> segment_states(const Dims& d, const Args<scalar_t, T>& a, StateKind kind) {
  const int64_t size = d.state_size();
  const bool reverse = kind == StateKind::kQueryGrad;
  std::vector<T> states(d.heads * d.segments * size, T(0));
  for_each_segment(d, [&](int64_t head, int64_t seg) {
    Workspace<T> w(d);
    T* state = states.data() + (head * d.segments + seg) * size;
    const int64_t first = seg * d.segment_chunks, last = std::min(d.chunks, first + d.segment_chunks);
    for (int64_t t0 = first * kChunk; t0 < std::min(d.n, last * kChunk); t0 += kChunk) {
      const int64_t rows = std::min(kChunk, d.n - t0);
      if (reverse) {
        cpu::pack(rows_of(a.q, d, head, t0, d.c), rows, d.c, d.cp, w.q.data(), w.qt.data());
        cpu::pack_grad(rows_of(a.grad, d, head, t0, d.m), rows_of(a.out, d, head, t0, d.m),
                       rows_of(a.den, d, head, t0, 1), rows, d.m, d.mp, w.g.data(), static_cast<T*>(nullptr),
                       w.gz.data());
        cpu::add_to_state(d, w.qt.data(), w.g.data(), w.gz.data(), state);
        continue;
      }
      const bool value_major = kind == StateKind::kValueKey;
      const T* k = cpu::pack(rows_of(a.k, d, head, t0, d.c), rows, d.c, d.cp, w.k.data(),
                             value_major ? static_cast<T*>(nullptr) : w.kt.data());
      const T* v = cpu::pack(rows_of(a.v, d, head, t0, d.m), rows, d.m, d.mp, w.v.data(),
                             value_major ? w.vt.data() : static_cast<T*>(nullptr));
      if (value_major) {
        cpu::add_to_value_major_state(d, w.vt.data(), k, state);
      } else {
        cpu::add_to_state(d, w.kt.data(), v, static_cast<const T*>(nullptr), state);
      }
    }
  });
  std::vector<T> carry(size);
  for (int64_t head = 0; head < d.heads; ++head) {
    boundary_state(d, a, kind, head, carry.data());
    for (int64_t step = 0; step < d.segments; ++step) {
      T* state = states.data() + (head * d.segments + (reverse ? d.segments - 1 - step : step)) * size;
      for (int64_t i = 0; i < size; ++i) {
        const T total = state[i];
        state[i] = carry[i];
        carry[i] += total;
      }
    }
  }
  return states;
}

template <typename scalar_t, typename T>
void start_state(const Dims& d, const Args<scalar_t, T>& a, StateKind kind, const std::vector<T>& states,
                 int64_t head, int64_t seg, Workspace<T>& w) {
  if (states.empty()) {
    boundary_state(d, a, kind, head, w.state.data());
  } else {
    const T* src = states.data() + (head * d.segments + seg) * d.state_size();
    std::copy(src, src + d.state_size(), w.state.begin());
  }
}

template <typename scalar_t, typename T>
void forward_chunk(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t t0, Workspace<T>& w) {
  const int64_t rows = std::min(kChunk, d.n - t0);
  const T* q = cpu::pack(rows_of(a.q, d, head, t0, d.c), rows, d.c, d.cp, w.q.data(), static_cast<T*>(nullptr));
  cpu::pack(rows_of(a.k, d, head, t0, d.c), rows, d.c, d.cp, w.k.data(), w.kt.data());
  const T* v = cpu::pack(rows_of(a.v, d, head, t0, d.m), rows, d.m, d.mp, w.v.data(), static_cast<T*>(nullptr));
  prefetch_chunk(d, a, head, t0 + kChunk, false);
  T *s = w.state.data(), *z = s + d.cp * d.mp, *num = w.rows.data();
  tile::gemm<T>(kChunk, kChunk, d.cp, q, d.cp, w.kt.data(), kChunk, w.square.data(), kChunk, false,
                Shape::kLowerOut);
  cpu::mask<T>(w.square.data(), true, nullptr, nullptr, w.den.data());
  tile::gemm<T>(kChunk, d.mp, kChunk, w.square.data(), kChunk, v, d.mp, num, d.mp, false, Shape::kLowerA);
  tile::gemm<T>(kChunk, d.mp, d.cp, q, d.cp, s, d.mp, num, d.mp, true);
  for (int64_t r = 0; r < rows; ++r) {
    T den = 1;
    if (a.normalize) {
      den = w.den[r] + a.eps;
      for (int64_t c = 0; c < d.cp; ++c) den += q[r * d.cp + c] * z[c];
      a.den_out[head * d.n + t0 + r] = den;
    }
    scalar_t* dst = rows_of(a.result, d, head, t0 + r, d.m);
    for (int64_t c = 0; c < d.m; ++c) dst[c] = static_cast<scalar_t>(num[r * d.mp + c] / den);
  }
  cpu::add_to_state(d, w.kt.data(), v, static_cast<const T*>(nullptr), s);
}

// dq_i = sum_{j<=i} (g_i . v_j + gz_i) k_j, with the value-major prefix state for earlier chunks.
template <typename scalar_t, typename T>
void dq_chunk(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t t0, Workspace<T>& w) {
  const int64_t rows = std::min(kChunk, d.n - t0);
  cpu::pack_grad(rows_of(a.grad, d, head, t0, d.m), rows_of(a.out, d, head, t0, d.m),
                 rows_of(a.den, d, head, t0, 1), rows, d.m, d.mp, w.g.data(), static_cast<T*>(nullptr), w.gz.data());
  const T* k = cpu::pack(rows_of(a.k, d, head, t0, d.c), rows, d.c, d.cp, w.k.data(), static_cast<T*>(nullptr));
  cpu::pack(rows_of(a.v, d, head, t0, d.m), rows, d.m, d.mp, w.v.data(), w.vt.data());
  prefetch_chunk(d, a, head, t0 + kChunk, true);
  T *st = w.state.data(), *z = st + d.cp * d.mp, *dq = w.rows.data();
  tile::gemm<T>(kChunk, kChunk, d.mp, w.g.data(), d.mp, w.vt.data(), kChunk, w.square.data(), kChunk, false,
                Shape::kLowerOut);
  cpu::mask<T>(w.square.data(), true, w.gz.data(), nullptr, nullptr);
  tile::gemm<T>(kChunk, d.cp, kChunk, w.square.data(), kChunk, k, d.cp, dq, d.cp, false, Shape::kLowerA);
  tile::gemm<T>(kChunk, d.cp, d.mp, w.g.data(), d.mp, st, d.cp, dq, d.cp, true);
  for (int64_t r = 0; r < rows; ++r) {
    scalar_t* dst = rows_of(a.dq, d, head, t0 + r, d.c);
    for (int64_t c = 0; c < d.c; ++c) dst[c] = static_cast<scalar_t>(dq[r * d.cp + c] + w.gz[r] * z[c]);
  }
  cpu::add_to_value_major_state(d, w.vt.data(), k, st);
}

// dk_j = sum_{i>=j} (v_j . g_i + gz_i) q_i and dv_j = sum_{i>=j} (k_j . q_i) g_i, with the
// suffix state for later chunks.
template <typename scalar_t, typename T>
void dkdv_chunk(const Dims& d, const Args<scalar_t, T>& a, int64_t head, int64_t t0, Workspace<T>& w) {
  const int64_t rows = std::min(kChunk, d.n - t0);
  cpu::pack_grad(rows_of(a.grad, d, head, t0, d.m), rows_of(a.out, d, head, t0, d.m),
                 rows_of(a.den, d, head, t0, 1), rows, d.m, d.mp, w.g.data(), w.gt.data(), w.gz.data());
  const T* q = cpu::pack(rows_of(a.q, d, head, t0, d.c), rows, d.c, d.cp, w.q.data(), w.qt.data());
  const T* k = cpu::pack(rows_of(a.k, d, head, t0, d.c), rows, d.c, d.cp, w.k.data(), static_cast<T*>(nullptr));
  const T* v = cpu::pack(rows_of(a.v, d, head, t0, d.m), rows, d.m, d.mp, w.v.data(), w.vt.data());
  prefetch_chunk(d, a, head, t0 - kChunk, true);
  T *r_state = w.state.data(), *r_ones = r_state + d.cp * d.mp, *sq = w.square.data();
  tile::gemm<T>(kChunk, kChunk, d.mp, v, d.mp, w.gt.data(), kChunk, sq, kChunk, false, Shape::kUpperOut);
  cpu::mask<T>(sq, false, nullptr, w.gz.data(), nullptr);
  tile::gemm<T>(kChunk, d.cp, kChunk, sq, kChunk, q, d.cp, w.rows.data(), d.cp, false, Shape::kUpperA);
  tile::gemm<T>(d.cp, kChunk, d.mp, r_state, d.mp, w.vt.data(), kChunk, w.cols.data(), kChunk, false);
  for (int64_t r = 0; r < rows; ++r) {
    scalar_t* dst = rows_of(a.dk, d, head, t0 + r, d.c);
    for (int64_t c = 0; c < d.c; ++c) {
      dst[c] = static_cast<scalar_t>(w.rows[r * d.cp + c] + w.cols[c * kChunk + r] + r_ones[c]);
    }
  }
  tile::gemm<T>(kChunk, kChunk, d.cp, k, d.cp, w.qt.data(), kChunk, sq, kChunk, false, Shape::kUpperOut);
  cpu::mask<T>(sq, false, nullptr, nullptr, nullptr);
  tile::gemm<T>(kChunk, d.mp, kChunk, sq, kChunk, w.g.data(), d.mp, w.rows.data(), d.mp, false, Shape::kUpperA);
  tile::gemm<T>(kChunk, d.mp, d.cp, k, d.cp, r_state, d.mp, w.rows.data(), d.mp, true);
  for (int64_t r = 0; r < rows; ++r) {
    scalar_t* dst = rows_of(a.dv, d, head, t0 + r, d.m);
    for (int64_t c = 0; c < d.m; ++c) dst[c] = static_cast<scalar_t>(w.rows[r * d.mp + c]);
  }
  cpu::add_to_state(d, w.qt.data(), w.g.data(), w.gz.data(), r_state);
}

template <typename scalar_t, typename T>
void run_forward(const Dims& d, const Args<scalar_t, T>& a) {
  const std::vector<T> starts = d.segments > 1 ? segment_states(d, a, StateKind::kKeyValue) : std::vector<T>();
  for_each_segment(d, [&](int64_t head, int64_t seg) {
    Workspace<T> w(d);
    start_state(d, a, StateKind::kKeyValue, starts, head, seg, w);
    const int64_t first = seg * d.segment_chunks, last = std::min(d.chunks, first + d.segment_chunks);
    for (int64_t chunk = first; chunk < last; ++chunk) forward_chunk(d, a, head, chunk * kChunk, w);
    if (seg == d.segments - 1) {  // the last segment ends on the final state
      cpu::store_state(d, w.state.data(), a.state_kv + head * d.c * d.m, a.state_z + head * d.c);
    }
  });
}

template <typename scalar_t, typename T>
void run_backward(const Dims& d, const Args<scalar_t, T>& a) {
  const bool split = d.segments > 1;
  const std::vector<T> prefix = split ? segment_states(d, a, StateKind::kValueKey) : std::vector<T>();
  const std::vector<T> suffix = split ? segment_states(d, a, StateKind::kQueryGrad) : std::vector<T>();
  for_each_segment(d, [&](int64_t head, int64_t seg) {
    Workspace<T> w(d);
    const int64_t first = seg * d.segment_chunks, last = std::min(d.chunks, first + d.segment_chunks);
    start_state(d, a, StateKind::kValueKey, prefix, head, seg, w);
    for (int64_t chunk = first; chunk < last; ++chunk) dq_chunk(d, a, head, chunk * kChunk, w);
    start_state(d, a, StateKind::kQueryGrad, suffix, head, seg, w);
    for (int64_t chunk = last - 1; chunk >= first; --chunk) dkdv_chunk(d, a, head, chunk * kChunk, w);
    if (seg == 0) cpu::store_state(d, w.state.data(), a.state_kv + head * d.c * d.m, a.state_z + head * d.c);
  });
}

template <typename T>
Dims dims_of(const at::Tensor& q, const at::Tensor& v) {
  return Dims(q.size(0) * q.size(1), q.size(2), q.size(3), v.size(3), tile::kColBlock<T>);
}

// A contiguous view of an optional state tensor, or an undefined tensor.
at::Tensor contiguous_or_undefined(const std::optional<at::Tensor>& t) {
  return t.has_value() ? t->contiguous() : at::Tensor();
}

template <typename T>
const T* data_or_null(const at::Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
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

ForwardResult causal_product_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double eps,
                                 bool normalize, const std::optional<at::Tensor>& kv,
                                 const std::optional<at::Tensor>& normaliser) {
  check_inputs(q, k, v);
  check_state(kv, normaliser, q, v, "initial state");
  const auto qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  const auto kv0 = contiguous_or_undefined(kv), z0 = contiguous_or_undefined(normaliser);
  auto out = at::empty(vc.sizes(), vc.options());
  const auto acc_options = vc.options().dtype(accumulation_type(vc.scalar_type()));
  auto den = normalize ? at::empty({q.size(0), q.size(1), q.size(2)}, acc_options) : at::empty({0}, acc_options);
  auto kv_final = at::empty({q.size(0), q.size(1), q.size(3), v.size(3)}, acc_options);
  auto z_final = at::empty({q.size(0), q.size(1), q.size(3)}, acc_options);
  if (q.numel() == 0 || v.numel() == 0) {
    forward_without_kernel(qc, kc, vc, eps, normalize, kv0, z0, out, den, kv_final, z_final);
    return {out, den, kv_final, z_final};
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
    run_forward(dims_of<T>(qc, vc), a);
  });
  return {out, den, kv_final, z_final};
}

BackwardResult causal_product_backward_cpu(const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
                                           const at::Tensor& v, const at::Tensor& out, const at::Tensor& denominator,
                                           bool normalize, const std::optional<at::Tensor>& kv,
                                           const std::optional<at::Tensor>& normaliser,
                                           const std::optional<at::Tensor>& grad_kv,
                                           const std::optional<at::Tensor>& grad_normaliser) {
  check_inputs(q, k, v);
  check_state(kv, normaliser, q, v, "initial state");
  check_state(grad_kv, grad_normaliser, q, v, "final-state gradient");
  TORCH_CHECK(grad_out.sizes() == v.sizes() && out.sizes() == v.sizes(),
              "lintf::causal_product_backward: grad_out and out must have v's shape ", v.sizes());
  const auto qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  const auto gc = grad_out.to(vc.scalar_type()).contiguous(), oc = out.to(vc.scalar_type()).contiguous();
  const auto acc = accumulation_type(vc.scalar_type());
  const auto dc = normalize ? denominator.to(acc).contiguous() : denominator;
  const auto kv0 = contiguous_or_undefined(kv), z0 = contiguous_or_undefined(normaliser);
  const auto gkv = contiguous_or_undefined(grad_kv), gz = contiguous_or_undefined(grad_normaliser);
  auto dq = at::empty_like(qc), dk = at::empty_like(kc), dv = at::empty_like(vc);
  auto dkv0 = at::empty({q.size(0), q.size(1), q.size(3), v.size(3)}, vc.options().dtype(acc));
  auto dz0 = at::empty({q.size(0), q.size(1), q.size(3)}, vc.options().dtype(acc));
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
    a.dq = dq.data_ptr<scalar_t>(), a.dk = dk.data_ptr<scalar_t>(), a.dv = dv.data_ptr<scalar_t>();
    a.normalize = normalize;
    a.kv0 = data_or_null<T>(kv0), a.z0 = data_or_null<T>(z0);
    a.grad_kv = data_or_null<T>(gkv), a.grad_z = data_or_null<T>(gz);
    a.state_kv = dkv0.data_ptr<T>(), a.state_z = dz0.data_ptr<T>();
    run_backward(dims_of<T>(qc, vc), a);
  });
  return {dq, dk, dv, dkv0, dz0};
}

TORCH_LIBRARY(lintf, m) {
  m.set_python_module("lintf.ops.causal_product");
  m.def(
      "causal_product(Tensor q, Tensor k, Tensor v, float eps, bool normalize, Tensor? kv=None, "
      "Tensor? normaliser=None) -> (Tensor, Tensor, Tensor, Tensor)");
  m.def(
      "causal_product_backward(Tensor grad_out, Tensor q, Tensor k, Tensor v, Tensor out, "
      "Tensor denominator, bool normalize, Tensor? kv=None, Tensor? normaliser=None, Tensor? grad_kv=None, "
      "Tensor? grad_normaliser=None) -> (Tensor, Tensor, Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(lintf, CPU, m) {
  m.impl("causal_product", &causal_product_cpu);
  m.impl("causal_product_backward", &causal_product_backward_cpu);
}

}  // namespace lintf
