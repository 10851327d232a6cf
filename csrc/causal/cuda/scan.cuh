// The scan CUDA kernel of the lintf causal product: one block per (batch*head, tile of output columns)
// walks the sequence in order. The chunked tensor-core kernels (chunk*.cuh) replace
// it for long sequences; it stays for fp64, for very short sequences, for heads wider than the chunked
// kernels take, and when LINTF_CUDA_KERNEL=scan selects it (see causal_product_cuda.cu).
//
// One primitive, out_t = a_t . (S0 + sum_{s<=t} b_s c_s^T) (or s >= t with `reverse`), serves the
// forward (a=q, b=k, c=[v, 1]: the ones column yields the normaliser) and all three gradients
// (dq: a=g', b=[v, 1], c=k; dk: a=[v, 1], b=g', c=q reversed; dv: a=k, b=q, c=g reversed, with
// g' = [g / den, -(g . out) / den]). S0 (dim_ab x dim_c per head) is where the running state
// starts: the initial state [kv, normaliser] forward and for dq, the final state's gradient for the
// reverse sweeps; the state after the last step is written out (the final state forward, the
// initial state's gradient from the dk sweep). Each block owns one (batch*head) and a tile of
// `cols` output columns; its running state (dim_ab x cols, accumulation dtype) sits in shared
// memory and the sequence is walked in order, so memory never grows with N beyond the fp32
// operand copies. Operands are converted to the accumulation dtype (fp32, or fp64 for fp64)
// before the kernel.
#pragma once

#include "causal/causal_product.h"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>

namespace lintf {
namespace scan {

constexpr int kThreads = 256;
constexpr int kMaxCols = 32;

// state_in (heads, dim_ab, dim_c) may be null (zeros); state_out (same shape) receives the last state.
template <typename T>
__global__ void causal_product_kernel(const T* __restrict__ a, const T* __restrict__ b, const T* __restrict__ c,
                                      const T* __restrict__ state_in, T* __restrict__ out, T* __restrict__ state_out,
                                      int64_t n, int64_t dim_ab, int64_t dim_c, bool reverse) {
  extern __shared__ unsigned char shared_bytes[];
  const int cols = blockDim.x, groups = blockDim.y;
  T* state = reinterpret_cast<T*>(shared_bytes);  // dim_ab x cols
  T* a_t = state + dim_ab * cols;                  // dim_ab
  T* b_t = a_t + dim_ab;                           // dim_ab
  T* c_t = b_t + dim_ab;                           // cols
  T* partial = c_t + cols;                         // groups x cols
  const int x = threadIdx.x, y = threadIdx.y, tid = y * cols + x, n_threads = cols * groups;
  const int64_t col = static_cast<int64_t>(blockIdx.y) * cols + x;
  const int64_t head = blockIdx.x;
  a += head * n * dim_ab;
  b += head * n * dim_ab;
  c += head * n * dim_c;
  out += head * n * dim_c;
  const int64_t state_offset = head * dim_ab * dim_c;
  // each state entry (r, x) is read and written by thread (x, r % groups) only: no barrier needed here
  for (int64_t r = y; r < dim_ab; r += groups) {
    state[r * cols + x] = state_in != nullptr && col < dim_c ? state_in[state_offset + r * dim_c + col] : T(0);
  }
  for (int64_t step = 0; step < n; ++step) {
    const int64_t t = reverse ? n - 1 - step : step;
    __syncthreads();  // the previous step's readers are done with a_t, b_t, c_t and partial
    for (int64_t r = tid; r < dim_ab; r += n_threads) {
      a_t[r] = a[t * dim_ab + r];
      b_t[r] = b[t * dim_ab + r];
    }
    if (y == 0) c_t[x] = col < dim_c ? c[t * dim_c + col] : T(0);
    __syncthreads();
    T acc = 0;
    for (int64_t r = y; r < dim_ab; r += groups) {
      const T s = state[r * cols + x] + b_t[r] * c_t[x];
      state[r * cols + x] = s;
      acc += a_t[r] * s;
    }
    partial[y * cols + x] = acc;
    __syncthreads();
    if (y == 0 && col < dim_c) {
      T sum = 0;
      for (int g = 0; g < groups; ++g) sum += partial[g * cols + x];
      out[t * dim_c + col] = sum;
    }
  }
  if (col < dim_c) {
    for (int64_t r = y; r < dim_ab; r += groups) state_out[state_offset + r * dim_c + col] = state[r * cols + x];
  }
}

inline int64_t shared_bytes_for(int64_t dim_ab, int64_t cols, int64_t groups, int64_t element) {
  return (dim_ab * cols + 2 * dim_ab + cols + groups * cols) * element;
}

// Whether every sweep's running state fits one block's shared memory with one column per block: the
// feature sizes c (forward, dv) and m + 1 (dq, dk) in the accumulation dtype.
inline bool fits(int64_t c, int64_t m, at::ScalarType accumulation, int device) {
  int limit = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  for (const int64_t dim_ab : {c, m + 1}) {
    const int64_t groups = std::min<int64_t>(kThreads, std::max<int64_t>(dim_ab, 1));
    if (shared_bytes_for(dim_ab, 1, groups, at::elementSize(accumulation)) > limit) return false;
  }
  return true;
}

// Causal product of contiguous accumulation-dtype a, b (.., n, dim_ab) and c (.., n, dim_c) from the
// optional starting state (.., dim_ab, dim_c): the output (.., n, dim_c) and the state after the last step.
inline std::tuple<at::Tensor, at::Tensor> product(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c,
                                           const at::Tensor& start, bool reverse) {
  const int64_t n = a.size(2), dim_ab = a.size(3), dim_c = c.size(3), heads = a.size(0) * a.size(1);
  auto out = at::zeros(c.sizes(), c.options());
  const auto start_c = start.defined() ? start.contiguous() : at::Tensor();
  auto last = at::empty({a.size(0), a.size(1), dim_ab, dim_c}, c.options());
  if (out.numel() == 0 || dim_ab == 0) {  // nothing to walk: the state stays where it started
    start_c.defined() ? last.copy_(start_c) : last.zero_();
    return {out, last};
  }
  int optin_bytes = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&optin_bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, a.get_device()));
  const int64_t limit = optin_bytes;
  const int64_t element = c.element_size();
  int64_t cols = kMaxCols;
  while (cols > 1 && shared_bytes_for(dim_ab, cols, kThreads / cols, element) > limit) cols /= 2;
  const int64_t groups = std::min<int64_t>(kThreads / cols, dim_ab);
  const int64_t bytes = shared_bytes_for(dim_ab, cols, groups, element);
  TORCH_CHECK(bytes <= limit, "lintf::causal_product (CUDA): feature size ", dim_ab, " needs ", bytes,
              " bytes of shared memory per block, more than the ", limit, " this GPU offers; the largest "
              "supported feature size here is about ", limit / element / 3, " (use the CPU op or smaller heads)");
  const dim3 grid(static_cast<unsigned>(heads), static_cast<unsigned>((dim_c + cols - 1) / cols));
  const dim3 block(static_cast<unsigned>(cols), static_cast<unsigned>(groups));
  const auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(c.scalar_type(), "lintf_causal_product_cuda", [&] {
    auto kernel = causal_product_kernel<scalar_t>;
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
    kernel<<<grid, block, bytes, stream>>>(a.data_ptr<scalar_t>(), b.data_ptr<scalar_t>(), c.data_ptr<scalar_t>(),
                                           start_c.defined() ? start_c.data_ptr<scalar_t>() : nullptr,
                                           out.data_ptr<scalar_t>(), last.data_ptr<scalar_t>(), n, dim_ab, dim_c,
                                           reverse);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {out, last};
}

inline at::Tensor with_ones(const at::Tensor& x) {
  return at::cat({x, at::ones_like(x.narrow(3, 0, 1))}, 3);
}

// [kv, normaliser] as one (B, H, C, M + 1) state (zeros for an absent part), or undefined when both are absent.
inline at::Tensor joined_state(const std::optional<at::Tensor>& kv, const std::optional<at::Tensor>& normaliser,
                        const at::Tensor& q, const at::Tensor& v) {
  if (!kv.has_value() && !normaliser.has_value()) return at::Tensor();
  const auto options = v.options().dtype(accumulation_type(v.scalar_type()));
  const auto kv_part = kv.has_value() ? *kv : at::zeros({q.size(0), q.size(1), q.size(3), v.size(3)}, options);
  const auto z_part = normaliser.has_value() ? *normaliser : at::zeros({q.size(0), q.size(1), q.size(3)}, options);
  return at::cat({kv_part, z_part.unsqueeze(3)}, 3);
}

inline at::Tensor optional_or_undefined(const std::optional<at::Tensor>& t) {
  return t.has_value() ? *t : at::Tensor();
}

inline ForwardResult forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double eps, bool normalize,
                             const std::optional<at::Tensor>& kv, const std::optional<at::Tensor>& normaliser) {
  const auto acc = accumulation_type(v.scalar_type());
  const auto qa = q.to(acc).contiguous(), ka = k.to(acc).contiguous(), va = v.to(acc).contiguous();
  const int64_t m = v.size(3);
  if (!normalize) {
    auto [out, last] = product(qa, ka, va, optional_or_undefined(kv), false);  // last: (B, H, C, M)
    auto z = ka.sum(2);                                                         // (B, H, C)
    if (normaliser.has_value()) z = z + *normaliser;
    return {out.to(v.scalar_type()), at::empty({0}, va.options()), last, z};
  }
  auto [sums, last] = product(qa, ka, with_ones(va), joined_state(kv, normaliser, q, v), false);  // (.., M + 1)
  const auto den = sums.select(3, m) + eps;
  const auto out = (sums.narrow(3, 0, m) / den.unsqueeze(3)).to(v.scalar_type());
  return {out, den.contiguous(), last.narrow(3, 0, m).contiguous(), last.select(3, m).contiguous()};
}

inline BackwardResult backward(const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const at::Tensor& out, const at::Tensor& denominator, bool normalize,
                               const std::optional<at::Tensor>& kv, const std::optional<at::Tensor>& normaliser,
                               const std::optional<at::Tensor>& grad_kv,
                               const std::optional<at::Tensor>& grad_normaliser) {
  const auto acc = accumulation_type(v.scalar_type());
  const auto qa = q.to(acc).contiguous(), ka = k.to(acc).contiguous();
  const int64_t m = v.size(3);
  auto g = grad_out.to(acc), values = v.to(acc).contiguous();
  // states of the value-major sweeps are transposed: (B, H, M[+1], C)
  at::Tensor start_q, start_k;
  if (normalize) {
    const auto inv = denominator.to(acc).reciprocal().unsqueeze(3);     // (B, H, N, 1)
    const auto gz = -(g * out.to(acc)).sum(3, /*keepdim=*/true) * inv;  // gradient of the ones column
    g = at::cat({g * inv, gz}, 3);
    values = with_ones(values);
    start_q = joined_state(kv, normaliser, q, v);
    start_k = joined_state(grad_kv, grad_normaliser, q, v);
  } else {
    start_q = optional_or_undefined(kv);
    start_k = optional_or_undefined(grad_kv);
  }
  g = g.contiguous();
  const auto dq = std::get<0>(product(g, values, ka, start_q.defined() ? start_q.transpose(2, 3) : start_q, false));
  auto [dk, d_start] = product(values, g, qa, start_k.defined() ? start_k.transpose(2, 3) : start_k, true);
  const auto dv = std::get<0>(product(ka, qa, g.narrow(3, 0, m).contiguous(), optional_or_undefined(grad_kv), true));
  auto d_kv = d_start.narrow(2, 0, m).transpose(2, 3).contiguous();  // (B, H, C, M)
  auto d_normaliser = at::zeros({q.size(0), q.size(1), q.size(3)}, qa.options());
  if (normalize) {
    d_normaliser = d_start.select(2, m).contiguous();  // (B, H, C)
  } else if (grad_normaliser.has_value()) {  // without the ones column the normaliser is k's sum alone
    dk = dk + grad_normaliser->unsqueeze(2);
    d_normaliser = grad_normaliser->clone();
  }
  const auto dtype = v.scalar_type();
  return {dq.to(dtype), dk.to(dtype), dv.to(dtype), d_kv, d_normaliser};
}

}  // namespace scan
}  // namespace lintf
