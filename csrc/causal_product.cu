// CUDA kernels of the lintf causal product (semantics in causal_product.h).
//
// One primitive, out_t = sum_{s<=t} (a_t . b_s) c_s (or s >= t with `reverse`), serves the forward
// (a=q, b=k, c=[v, 1]: the ones column yields the normaliser) and all three gradients
// (dq: a=g', b=[v, 1], c=k; dk: a=[v, 1], b=g', c=q reversed; dv: a=k, b=q, c=g reversed, with
// g' = [g / den, -(g . out) / den]). Each block owns one (batch*head) and a tile of `cols` output
// columns; its running state (C x cols, accumulation dtype) sits in shared memory and the sequence
// is walked in order, so memory never grows with N beyond the fp32 operand copies. Operands are
// converted to the accumulation dtype (fp32, or fp64 for fp64) before the kernel.
#include "causal_product.h"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

namespace lintf {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxCols = 32;

template <typename T>
__global__ void causal_product_kernel(const T* __restrict__ a, const T* __restrict__ b, const T* __restrict__ c,
                                      T* __restrict__ out, int64_t n, int64_t dim_ab, int64_t dim_c, bool reverse) {
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
  for (int64_t r = tid; r < dim_ab * cols; r += n_threads) state[r] = T(0);
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
}

int64_t shared_bytes_for(int64_t dim_ab, int64_t cols, int64_t groups, int64_t element) {
  return (dim_ab * cols + 2 * dim_ab + cols + groups * cols) * element;
}

// out (heads.., n, dim_c) = causal product of contiguous accumulation-dtype a, b (.., n, dim_ab), c.
at::Tensor product(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, bool reverse) {
  const int64_t n = a.size(2), dim_ab = a.size(3), dim_c = c.size(3), heads = a.size(0) * a.size(1);
  auto out = at::zeros(c.sizes(), c.options());
  if (out.numel() == 0 || dim_ab == 0) return out;
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
                                           out.data_ptr<scalar_t>(), n, dim_ab, dim_c, reverse);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return out;
}

at::Tensor with_ones(const at::Tensor& x) {
  return at::cat({x, at::ones_like(x.narrow(3, 0, 1))}, 3);
}

std::tuple<at::Tensor, at::Tensor> causal_product_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                       double eps, bool normalize) {
  check_inputs(q, k, v);
  const c10::cuda::CUDAGuard guard(q.device());
  const auto acc = accumulation_type(v.scalar_type());
  const auto qa = q.to(acc).contiguous(), ka = k.to(acc).contiguous(), va = v.to(acc).contiguous();
  if (!normalize) return {product(qa, ka, va, false).to(v.scalar_type()), at::empty({0}, va.options())};
  const auto sums = product(qa, ka, with_ones(va), false);  // (B, H, N, M + 1)
  const auto den = sums.select(3, v.size(3)) + eps;
  const auto out = (sums.narrow(3, 0, v.size(3)) / den.unsqueeze(3)).to(v.scalar_type());
  return {out, den.contiguous()};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> causal_product_backward_cuda(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
    const at::Tensor& denominator, bool normalize) {
  check_inputs(q, k, v);
  const c10::cuda::CUDAGuard guard(q.device());
  const auto acc = accumulation_type(v.scalar_type());
  const auto qa = q.to(acc).contiguous(), ka = k.to(acc).contiguous();
  auto g = grad_out.to(acc), values = v.to(acc).contiguous();
  if (normalize) {
    const auto inv = denominator.to(acc).reciprocal().unsqueeze(3);          // (B, H, N, 1)
    const auto gz = -(g * out.to(acc)).sum(3, /*keepdim=*/true) * inv;       // gradient of the ones column
    g = at::cat({g * inv, gz}, 3);
    values = with_ones(values);
  }
  g = g.contiguous();
  const auto dq = product(g, values, ka, false);
  const auto dk = product(values, g, qa, true);
  const auto dv = product(ka, qa, g.narrow(3, 0, v.size(3)).contiguous(), true);
  const auto dtype = v.scalar_type();
  return {dq.to(dtype), dk.to(dtype), dv.to(dtype)};
}

}  // namespace

TORCH_LIBRARY_IMPL(lintf, CUDA, m) {
  m.impl("causal_product", &causal_product_cuda);
  m.impl("causal_product_backward", &causal_product_backward_cuda);
}

}  // namespace lintf
