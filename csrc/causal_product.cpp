// CPU kernels of the lintf causal product and the TORCH_LIBRARY registration of its schema.
//
// Forward, per chunk of kChunk positions with running state S = sum_j k_j v_j^T, z = sum_j k_j:
//   out = tril(Q K^T) V + Q S,  den = rowsum(tril(Q K^T)) + Q z + eps,  then S += K^T V, z += K^T 1.
// Backward (paper eq. 13-15, normaliser folded in as an all-ones value column whose gradient is
// gz): a forward sweep gives dq from the prefix state S (kept value-major, S^T, so G S^T needs no
// transpose), a reverse sweep gives dk and dv from the suffix state R = sum_i q_i g_i^T,
// r = sum_i q_i gz_i. Both sweeps keep only O(C M) state per thread, so memory beyond inputs,
// outputs and gradients does not grow with N.
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

// States each segment starts from, (heads, segments, state_size): the exclusive prefix (suffix
// for kQueryGrad) of the per-segment totals.
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
    std::fill(carry.begin(), carry.end(), T(0));
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

template <typename T>
void start_state(const Dims& d, const std::vector<T>& states, int64_t head, int64_t seg, Workspace<T>& w) {
  if (states.empty()) {
    std::fill(w.state.begin(), w.state.end(), T(0));
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
    start_state(d, starts, head, seg, w);
    const int64_t first = seg * d.segment_chunks, last = std::min(d.chunks, first + d.segment_chunks);
    for (int64_t chunk = first; chunk < last; ++chunk) forward_chunk(d, a, head, chunk * kChunk, w);
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
    start_state(d, prefix, head, seg, w);
    for (int64_t chunk = first; chunk < last; ++chunk) dq_chunk(d, a, head, chunk * kChunk, w);
    start_state(d, suffix, head, seg, w);
    for (int64_t chunk = last - 1; chunk >= first; --chunk) dkdv_chunk(d, a, head, chunk * kChunk, w);
  });
}

template <typename T>
Dims dims_of(const at::Tensor& q, const at::Tensor& v) {
  return Dims(q.size(0) * q.size(1), q.size(2), q.size(3), v.size(3), tile::kColBlock<T>);
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> causal_product_cpu(const at::Tensor& q, const at::Tensor& k,
                                                      const at::Tensor& v, double eps, bool normalize) {
  check_inputs(q, k, v);
  const auto qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  auto out = at::empty(vc.sizes(), vc.options());
  const auto acc_options = vc.options().dtype(accumulation_type(vc.scalar_type()));
  auto den = normalize ? at::empty({q.size(0), q.size(1), q.size(2)}, acc_options) : at::empty({0}, acc_options);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, vc.scalar_type(), "lintf_causal_product", [&] {
    using T = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    Args<scalar_t, T> a{qc.data_ptr<scalar_t>(), kc.data_ptr<scalar_t>(), vc.data_ptr<scalar_t>()};
    a.result = out.data_ptr<scalar_t>();
    a.den_out = normalize ? den.data_ptr<T>() : nullptr;
    a.eps = static_cast<T>(eps);
    a.normalize = normalize;
    if (q.numel() > 0 && v.numel() > 0) run_forward(dims_of<T>(qc, vc), a);
  });
  if (q.numel() == 0) {  // C == 0: empty sums
    out.zero_();
    den.fill_(eps);
  }
  return {out, den};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> causal_product_backward_cpu(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& out, const at::Tensor& denominator, bool normalize) {
  check_inputs(q, k, v);
  TORCH_CHECK(grad_out.sizes() == v.sizes() && out.sizes() == v.sizes(),
              "lintf::causal_product_backward: grad_out and out must have v's shape ", v.sizes());
  const auto qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  const auto gc = grad_out.to(vc.scalar_type()).contiguous(), oc = out.to(vc.scalar_type()).contiguous();
  const auto acc = accumulation_type(vc.scalar_type());
  const auto dc = normalize ? denominator.to(acc).contiguous() : denominator;
  auto dq = at::empty_like(qc), dk = at::empty_like(kc), dv = at::empty_like(vc);
  if (q.numel() == 0 || v.numel() == 0) {  // C == 0 or M == 0: every gradient is an empty sum
    dq.zero_(), dk.zero_(), dv.zero_();
    return {dq, dk, dv};
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, vc.scalar_type(), "lintf_causal_product_backward", [&] {
    using T = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    Args<scalar_t, T> a{qc.data_ptr<scalar_t>(), kc.data_ptr<scalar_t>(), vc.data_ptr<scalar_t>()};
    a.grad = gc.data_ptr<scalar_t>();
    a.out = oc.data_ptr<scalar_t>();
    a.den = normalize ? dc.data_ptr<T>() : nullptr;
    a.dq = dq.data_ptr<scalar_t>(), a.dk = dk.data_ptr<scalar_t>(), a.dv = dv.data_ptr<scalar_t>();
    a.normalize = normalize;
    run_backward(dims_of<T>(qc, vc), a);
  });
  return {dq, dk, dv};
}

TORCH_LIBRARY(lintf, m) {
  m.set_python_module("lintf.ops.causal_product");
  m.def("causal_product(Tensor q, Tensor k, Tensor v, float eps, bool normalize) -> (Tensor, Tensor)");
  m.def(
      "causal_product_backward(Tensor grad_out, Tensor q, Tensor k, Tensor v, Tensor out, "
      "Tensor denominator, bool normalize) -> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(lintf, CPU, m) {
  m.impl("causal_product", &causal_product_cpu);
  m.impl("causal_product_backward", &causal_product_backward_cpu);
}

}  // namespace lintf
