// CPU kernels of the decayed causal product (schema and semantics in ../decayed_product.{cpp,h})
// and their registration for CPU tensors. Heads run in parallel on torch's threads, each on the
// vector path that runs now (common/cpu/path.h; LINTF_CPU_PATH, else the widest this CPU runs). The
// Python side (fake and autograd rules) is lintf/ops/decayed/compiled.py.
#include "common/cpu/output.h"
#include "common/cpu/tuning.h"
#include "decayed/decayed_product.h"
#include "decayed/inputs.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <string>
#include <tuple>
#include <vector>

namespace lintf::decayed {
namespace {

// Gradients (dq, dk, dv) from cpu::streamed_bytes on (4 x L2, common/cpu/tuning.h) are written with
// streaming stores: many times a core's L2, they leave the caches before anyone reads them.
// Forward+backward measured 3% faster with them in both backward modes (B=1, H=8, N=16384, one
// thread, alternating calls). The sweeps prefetch cpu::prefetch_chunks chunks ahead.
int64_t prefetch_distance(const at::Tensor& q, const at::Tensor& v, const cpu::CacheSizes& caches) {
  return cpu::prefetch_chunks(cpu::kChunk * cpu::decayed_row_bytes(q.size(3), v.size(3), v.element_size()), caches);
}

const Path& selected_path() {
  return cpu::selected_table({avx512_path(), avx2_path(), portable_path()}, "lintf::decayed_product");
}

at::Tensor contiguous_or_undefined(const std::optional<at::Tensor>& t) {
  return t.has_value() ? t->contiguous() : at::Tensor();
}

template <typename T>
const T* data_or_null(const at::Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}

// (B, H, C, M) state in the accumulation dtype.
at::Tensor state_like(const at::Tensor& q, const at::Tensor& v) {
  return at::empty({q.size(0), q.size(1), q.size(3), v.size(3)}, v.options().dtype(accumulation_type(v.scalar_type())));
}

// With an empty B*H, N, C or M nothing is multiplied: a state only decays by exp(sum of log_decay).
at::Tensor decayed_whole(const at::Tensor& state, const at::Tensor& log_decay) {
  return state * log_decay.sum(2).exp().unsqueeze(-1).unsqueeze(-1);
}

template <typename scalar_t, typename T>
Args<scalar_t, T> args_of(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& log_decay,
                          const at::Tensor& state0, at::Tensor& state_out) {
  Args<scalar_t, T> a;
  a.q = q.data_ptr<scalar_t>();
  a.k = k.data_ptr<scalar_t>();
  a.v = v.data_ptr<scalar_t>();
  a.log_decay = log_decay.data_ptr<T>();
  a.state0 = data_or_null<T>(state0);
  a.state_out = state_out.data_ptr<T>();
  return a;
}

void check_spacing(int64_t state_spacing) {
  TORCH_CHECK(state_spacing >= 0 && state_spacing % cpu::kChunk == 0,
              "lintf::decayed_product: state_spacing must be 0 (keep no chunk states) or a positive multiple of ",
              cpu::kChunk, ", got ", state_spacing);
}

// (B, H, ceil(N / state_spacing), C, M): the states entering every span; no span for a spacing of 0.
std::vector<int64_t> chunk_states_shape(const at::Tensor& q, const at::Tensor& v, int64_t state_spacing) {
  const int64_t spans = state_spacing == 0 ? 0 : cpu::ceil_div(q.size(2), state_spacing);
  return {q.size(0), q.size(1), spans, q.size(3), v.size(3)};
}

// The backward's chunk states: absent, or the forward's with state_spacing > 0.
void check_chunk_states(const at::Tensor& q, const at::Tensor& v, const std::optional<at::Tensor>& states,
                        int64_t state_spacing) {
  check_spacing(state_spacing);
  if (!states.has_value()) return;
  const auto shape = chunk_states_shape(q, v, state_spacing);
  const auto acc = accumulation_type(v.scalar_type());
  TORCH_CHECK(state_spacing > 0 && states->sizes() == at::IntArrayRef(shape) && states->scalar_type() == acc,
              "lintf::decayed_product_backward: chunk_states must be (B, H, ceil(N / state_spacing), C, M) = ",
              at::IntArrayRef(shape), " of dtype ", acc, " with state_spacing > 0, got ", states->sizes(), ", ",
              states->scalar_type(), " and state_spacing ", state_spacing);
}

template <typename scalar_t, typename T>
void with_chunk_states(Args<scalar_t, T>& a, const at::Tensor& states, int64_t state_spacing) {
  if (state_spacing == 0) return;
  a.chunk_states = states.data_ptr<T>();
  a.state_spacing = state_spacing;
}

// Runs one per-head pass of the selected path on every (batch, head) of q (B, H, N, C), v (B, H, N, M).
template <typename scalar_t, typename T>
void run(void (*pass)(const Dims&, const Args<scalar_t, T>&, int64_t), const Path& path, const at::Tensor& q,
         const at::Tensor& v, const Args<scalar_t, T>& a) {
  const Dims d(q.size(0) * q.size(1), q.size(2), q.size(3), v.size(3), path.col_block<T>());
  at::parallel_for(0, d.heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t head = begin; head < end; ++head) pass(d, a, head);
  });
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> decayed_product_cpu(const at::Tensor& q, const at::Tensor& k,
                                                                   const at::Tensor& v, const at::Tensor& log_decay,
                                                                   const std::optional<at::Tensor>& initial_state,
                                                                   int64_t state_spacing) {
  decayed::check_inputs(q, k, v, log_decay, initial_state, "initial_state");
  check_spacing(state_spacing);
  const Path& path = selected_path();
  const auto qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous(), lc = log_decay.contiguous();
  const auto s0 = contiguous_or_undefined(initial_state);
  auto out = cpu::output(vc.sizes(), vc.options());
  auto final_state = state_like(qc, vc);
  auto chunk_states = at::empty(chunk_states_shape(qc, vc, state_spacing), final_state.options());
  if (q.numel() == 0 || v.numel() == 0) {
    out.zero_();  // not empty only when C == 0: every output is an empty sum
    final_state.copy_(s0.defined() ? decayed_whole(s0, lc) : at::zeros_like(final_state));
    return {out, final_state, chunk_states.zero_()};
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, vc.scalar_type(), "lintf_decayed_product", [&] {
    using T = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    auto a = args_of<scalar_t, T>(qc, kc, vc, lc, s0, final_state);
    a.out = out.data_ptr<scalar_t>();
    with_chunk_states(a, chunk_states, state_spacing);
    a.prefetch_chunks = prefetch_distance(qc, vc, cpu::cache_sizes());
    run<scalar_t, T>(path.kernels<scalar_t>().forward, path, qc, vc, a);
  });
  return {out, final_state, chunk_states};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> decayed_product_backward_cpu(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& log_decay, const std::optional<at::Tensor>& initial_state,
    const std::optional<at::Tensor>& grad_state, const std::optional<at::Tensor>& chunk_states,
    int64_t state_spacing) {
  decayed::check_inputs(q, k, v, log_decay, initial_state, "initial_state");
  decayed::check_inputs(q, k, v, log_decay, grad_state, "grad_state");
  check_chunk_states(q, v, chunk_states, state_spacing);
  const auto states = contiguous_or_undefined(chunk_states);
  TORCH_CHECK(grad_out.sizes() == v.sizes(), "lintf::decayed_product_backward: grad_out must have v's shape ",
              v.sizes(), ", got ", grad_out.sizes());
  const Path& path = selected_path();
  const auto qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous(), lc = log_decay.contiguous();
  const auto gc = grad_out.to(vc.scalar_type()).contiguous();
  const auto s0 = contiguous_or_undefined(initial_state), gs = contiguous_or_undefined(grad_state);
  auto dq = cpu::output(qc.sizes(), qc.options()), dk = cpu::output(kc.sizes(), kc.options());
  auto dv = cpu::output(vc.sizes(), vc.options()), d_log_decay = at::empty(lc.sizes(), lc.options());
  auto d_state0 = state_like(qc, vc);
  if (q.numel() == 0 || v.numel() == 0) {  // only the final state's gradient reaches the initial state
    dq.zero_(), dk.zero_(), dv.zero_(), d_log_decay.zero_();
    d_state0.copy_(gs.defined() ? decayed_whole(gs, lc) : at::zeros_like(d_state0));
    return {dq, dk, dv, d_log_decay, d_state0};
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, vc.scalar_type(), "lintf_decayed_product_backward", [&] {
    using T = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    auto a = args_of<scalar_t, T>(qc, kc, vc, lc, s0, d_state0);
    a.grad = gc.data_ptr<scalar_t>();
    a.grad_state = data_or_null<T>(gs);
    a.dq = dq.data_ptr<scalar_t>(), a.dk = dk.data_ptr<scalar_t>(), a.dv = dv.data_ptr<scalar_t>();
    a.d_log_decay = d_log_decay.data_ptr<T>();
    if (states.defined()) with_chunk_states(a, states, state_spacing);
    const cpu::CacheSizes caches = cpu::cache_sizes();
    a.stream_gradients = static_cast<int64_t>(dq.nbytes()) >= cpu::streamed_bytes(caches);
    a.prefetch_chunks = prefetch_distance(qc, vc, caches);
    run<scalar_t, T>(path.kernels<scalar_t>().backward, path, qc, vc, a);
  });
  return {dq, dk, dv, d_log_decay, d_state0};
}

}  // namespace lintf::decayed

TORCH_LIBRARY_IMPL(lintf, CPU, m) {
  m.impl("decayed_product", &lintf::decayed::decayed_product_cpu);
  m.impl("decayed_product_backward", &lintf::decayed::decayed_product_backward_cpu);
}
