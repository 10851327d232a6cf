// Host stand-in for CUDA's WMMA API (mma.h) in the CPU emulation of the CUDA kernels (cuda_emulation.h).
//
// A fragment holds its whole tile in every lane; lane 0 of each warp loads, multiplies and stores, the
// other lanes keep zeros and never store, so a warp computes what the GPU's warp-collective operations
// would. Loads and stores check WMMA's documented rules (256-bit aligned pointers, ldm a multiple of 16
// bytes, the pointer type of the fragment's element), and TF32 products ignore the low 13 mantissa bits
// of their operands as the tensor cores do.
#pragma once

#include "cuda_bf16.h"
#include "cuda_fp16.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

namespace nvcuda {
namespace wmma {

struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };
namespace precision {
struct tf32 {};
}  // namespace precision

template <typename T>
struct storage {
  using type = T;
};
template <>
struct storage<precision::tf32> {
  using type = float;
};

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static constexpr int rows = std::is_same_v<Use, matrix_b> ? K : M;
  static constexpr int cols = std::is_same_v<Use, matrix_a> ? K : N;
  static constexpr int num_elements = rows * cols;
  typename storage<T>::type x[num_elements]{};
};

inline bool emulated_lane_zero() { return threadIdx.x % 32 == 0; }

inline void check_operand(const void* p, unsigned ldm, size_t element) {
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0 || (ldm * element) % 16 != 0) {
    std::fprintf(stderr, "wmma emulation: pointer %p (needs 32-byte alignment) or ldm %u (x %zu bytes, needs a "
                 "multiple of 16) breaks WMMA's rules\n", p, ldm, element);
    std::abort();
  }
}

inline float __float_to_tf32(float x) {  // cvt.rna.tf32.f32: nearest, ties away from zero
  if (!std::isfinite(x)) return x;
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  bits = (bits + 0x1000u) & 0xFFFFE000u;
  std::memcpy(&x, &bits, 4);
  return x;
}

template <typename T>
float operand_value(T x) {
  if constexpr (std::is_same_v<T, float>) {  // a tf32 operand: the hardware reads 19 bits
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    bits &= 0xFFFFE000u;
    std::memcpy(&x, &bits, 4);
    return x;
  } else {
    return static_cast<float>(x);
  }
}

template <typename Use, int M, int N, int K, typename T, typename Layout, typename E>
void load_matrix_sync(fragment<Use, M, N, K, T, Layout>& f, const E* p, unsigned ldm) {
  using Fragment = fragment<Use, M, N, K, T, Layout>;
  static_assert(std::is_same_v<E, typename storage<T>::type>, "pointer type differs from the fragment's");
  check_operand(p, ldm, sizeof(E));
  if (!emulated_lane_zero()) return;
  for (int r = 0; r < Fragment::rows; ++r) {
    for (int c = 0; c < Fragment::cols; ++c) {
      f.x[r * Fragment::cols + c] = std::is_same_v<Layout, row_major> ? p[r * ldm + c] : p[c * ldm + r];
    }
  }
}

template <int M, int N, int K>
void load_matrix_sync(fragment<accumulator, M, N, K, float>& f, const float* p, unsigned ldm, layout_t layout) {
  check_operand(p, ldm, sizeof(float));
  if (!emulated_lane_zero()) return;
  for (int r = 0; r < M; ++r) {
    for (int c = 0; c < N; ++c) f.x[r * N + c] = layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r];
  }
}

template <int M, int N, int K>
void store_matrix_sync(float* p, const fragment<accumulator, M, N, K, float>& f, unsigned ldm, layout_t layout) {
  check_operand(p, ldm, sizeof(float));
  if (!emulated_lane_zero()) return;
  for (int r = 0; r < M; ++r) {
    for (int c = 0; c < N; ++c) (layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.x[r * N + c];
  }
}

template <typename Use, int M, int N, int K, typename T, typename Layout>
void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, float value) {
  for (auto& x : f.x) x = value;
}

template <int M, int N, int K, typename T, typename LayoutA, typename LayoutB>
void mma_sync(fragment<accumulator, M, N, K, float>& d, const fragment<matrix_a, M, N, K, T, LayoutA>& a,
              const fragment<matrix_b, M, N, K, T, LayoutB>& b, const fragment<accumulator, M, N, K, float>& c) {
  if (!emulated_lane_zero()) return;
  float result[M * N];
  for (int r = 0; r < M; ++r) {
    for (int n = 0; n < N; ++n) {
      float sum = c.x[r * N + n];
      for (int k = 0; k < K; ++k) sum += operand_value(a.x[r * K + k]) * operand_value(b.x[k * N + n]);
      result[r * N + n] = sum;
    }
  }
  std::memcpy(d.x, result, sizeof(result));
}

}  // namespace wmma
}  // namespace nvcuda
