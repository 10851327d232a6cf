// Host side that the chunked CUDA kernels' launch code shares ({causal,decayed,gla,delta}/cuda/chunk_launch.cuh):
// the operand type a dtype runs with, the shapes the kernels take (plan_with), and raw pointers of tensors.
#pragma once

#include "common/cuda/chunk_grid.cuh"
#ifndef LINTF_CUDA_EMULATION  // the emulation supplies its own runtime
#include "common/cuda/chunk_runtime.cuh"
#endif

#include <ATen/ATen.h>

#include <algorithm>
#include <limits>
#include <optional>

namespace lintf {
namespace chunk {

constexpr int kMaxFeatures = 128;  // c (padded) held whole by a block; larger heads use another path

// The operand type T of the tiles and whether fp32 products run split (3xTF32).
template <typename T, bool Split_>
struct Kind {
  using Type = T;
  static constexpr bool kSplit = Split_;
};

// Calls fn(Kind<T, Split>{}) for the operand type of dtype: fp32 as TF32, split (3xTF32) unless torch
// allows TF32 for fp32 matmuls (torch.backends.cuda.matmul.allow_tf32 / set_float32_matmul_precision).
//
// Args:
//   dtype: the inputs' dtype (fp32, fp16 or bf16).
//   op: the op's name for the error on any other dtype.
//   fn: a generic callable taking the Kind.
template <typename Fn>
void dispatch(at::ScalarType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case at::kFloat:
      if (at::globalContext().allowTF32CuBLAS()) {
        fn(Kind<float, false>{});
      } else {
        fn(Kind<float, true>{});
      }
      break;
    case at::kHalf: fn(Kind<__half, false>{}); break;
    case at::kBFloat16: fn(Kind<__nv_bfloat16, false>{}); break;
    default: TORCH_CHECK(false, op, " (CUDA, chunked): no tensor-core path for ", dtype);
  }
}

// The most dynamic shared memory any of the kernels with these shared-memory layouts takes.
template <typename T, template <typename> class... Layouts>
size_t largest_shared_bytes(int cp, int mt) {
  return std::max({Layouts<T>(cp, mt).bytes...});
}

// The dimensions the chunked kernels (with shared-memory layouts Layouts) run heads x n positions of c
// features and m value columns of dtype with on CUDA device `device`, or nullopt when they do not take them:
// fp64, more than kMaxFeatures features, a GPU before sm_80, too little shared memory for even 16 value
// columns per block, or more blocks than a grid holds. The layouts are sized for dtype's operand type, or
// for fp32 tiles when `tiles` is kFloat.
template <template <typename> class... Layouts>
std::optional<Dims> plan_shape(at::ScalarType dtype, int64_t heads, int64_t n, int64_t c, int64_t m, int device,
                               std::optional<at::ScalarType> tiles = std::nullopt) {
  if (dtype != at::kFloat && dtype != at::kHalf && dtype != at::kBFloat16) return std::nullopt;
  if (heads == 0 || n == 0 || c == 0 || m == 0 || c > kMaxFeatures) return std::nullopt;
  const runtime::DeviceInfo info = runtime::device_info(device);
  if (info.major < 8) return std::nullopt;
  const int cp = tile::round_up(static_cast<int>(c), 16);
  const int widest = tile::round_up(static_cast<int>(std::min<int64_t>(m, 64)), 16);
  for (const int mt : {widest, 32, 16}) {
    if (mt > widest) continue;
    const size_t bytes = tiles.value_or(dtype) == at::kFloat ? largest_shared_bytes<float, Layouts...>(cp, mt)
                                                           : largest_shared_bytes<__half, Layouts...>(cp, mt);
    if (bytes > info.shared_bytes) continue;
    const int64_t chunks = (n + kChunk - 1) / kChunk, value_tiles = (m + mt - 1) / mt;
    if (heads * chunks * value_tiles > std::numeric_limits<int32_t>::max()) return std::nullopt;
    return Dims{heads, n, static_cast<int>(c), static_cast<int>(m), cp, mt, static_cast<int>(chunks),
                static_cast<int>(value_tiles)};
  }
  return std::nullopt;
}

// plan_shape for q (B, H, N, C) and v (B, H, N, M) on q's device.
template <template <typename> class... Layouts>
std::optional<Dims> plan_with(const at::Tensor& q, const at::Tensor& v,
                              std::optional<at::ScalarType> tiles = std::nullopt) {
  return plan_shape<Layouts...>(q.scalar_type(), q.size(0) * q.size(1), q.size(2), q.size(3), v.size(3),
                                q.get_device(), tiles);
}

// t's data as T, or null when t is undefined.
template <typename T>
const T* data(const at::Tensor& t) {
  return t.defined() ? reinterpret_cast<const T*>(t.data_ptr()) : nullptr;
}

}  // namespace chunk
}  // namespace lintf
