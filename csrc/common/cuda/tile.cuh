// Block-level building blocks of the chunked CUDA kernels ({causal,decayed,gla}/cuda/chunk*.cuh, delta/cuda/sweeps.cuh):
// shared-memory tiles, their conversion to tensor-core operands and a block-wide tile product on
// WMMA (bf16 and fp16 operands, fp32 operands as TF32 or, for full fp32 accuracy, as 3xTF32: each
// operand split into a TF32 head and a TF32 remainder). Accumulation is always fp32.
//
// Conventions: a tile is a row-major array in shared memory whose leading dimension `ld` is its
// padded column count (padded_ld): rows and columns are multiples of 16, and every tile starts on
// a 128-byte boundary, which meets WMMA's alignment rules (256-bit pointers, ldm a multiple of 16
// bytes). Every function here is called by all threads of the block; the caller places the
// __syncthreads() between a tile's writers and its readers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <cstdint>
#include <type_traits>

// WMMA on bf16 and tf32 needs sm_80; for older targets the kernels compile to a trap and the host
// never launches them (it checks the device's compute capability).
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define LINTF_TENSOR_CORES 1
#else
#define LINTF_TENSOR_CORES 0
#endif

namespace lintf {
namespace tile {

namespace wmma = nvcuda::wmma;

constexpr int kThreads = 256;  // eight warps per block
constexpr int kWarps = kThreads / 32;
constexpr int kChunk = 64;  // positions per chunk: the intra-chunk product is a (64 x 64) masked matmul

__host__ __device__ constexpr int round_up(int x, int multiple) { return (x + multiple - 1) / multiple * multiple; }

// Leading dimension of a tile of `cols` columns: 16 bytes of padding spread the rows over the banks.
template <typename T>
__host__ __device__ constexpr int padded_ld(int cols) {
  return cols + static_cast<int>(16 / sizeof(T));
}

// Consecutive 128-byte-aligned arrays in dynamic shared memory: a kernel's layout takes its tiles from the
// block's shared memory (base), and the same code sizes the launch on the host (no base: only bytes counts).
struct Carve {
  unsigned char* base = nullptr;
  size_t bytes = 0;
  template <typename T>
  __host__ __device__ T* take(int64_t count) {
    const size_t at = bytes;
    bytes += (static_cast<size_t>(count) * sizeof(T) + 127) / 128 * 128;
#ifdef __CUDA_ARCH__
    return reinterpret_cast<T*>(base + at);  // a pointer sum, so the compiler sees shared-memory accesses
#else
    return reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(base) + at);  // on the host base may be null
#endif
  }
};

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// dst (rows x cols) <- src[r * src_ld + c] (times row_scale[r] when given) for r < valid_rows and
// c < valid_cols, zeros elsewhere (the padding rows and columns the tensor-core tiles need).
// Each thread issues kLoadsInFlight global loads before it stores any of them: a block has few warps,
// and one load waited for at a time would leave every element's full memory latency on the block's path.
constexpr int kLoadsInFlight = 16;

template <typename In, typename Out>
__device__ void load_tile(const In* __restrict__ src, int64_t src_ld, int valid_rows, int valid_cols,
                          const float* __restrict__ row_scale, Out* dst, int ld, int rows, int cols) {
  const int count = rows * cols, stride = blockDim.x;
  for (int first = threadIdx.x; first < count; first += stride * kLoadsInFlight) {
    float x[kLoadsInFlight];
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int e = first + u * stride, r = e / cols, c = e - r * cols;
      x[u] = 0.f;
      if (e < count && r < valid_rows && c < valid_cols) {
        x[u] = to_float(src[r * src_ld + c]);
        if (row_scale != nullptr) x[u] *= row_scale[r];
      }
    }
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int e = first + u * stride, r = e / cols, c = e - r * cols;
      if (e < count) dst[r * ld + c] = from_float<Out>(x[u]);
    }
  }
}

// Largest |x| of an fp32 tile, the same in every thread (NaNs are skipped; they reach the output anyway).
// `scratch` holds kWarps floats of shared memory.
__device__ inline float block_max_abs(const float* src, int ld, int rows, int cols, float* scratch) {
  float m = 0.f;
  for (int e = threadIdx.x; e < rows * cols; e += blockDim.x) m = fmaxf(m, fabsf(src[(e / cols) * ld + e % cols]));
  for (int offset = 16; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = m;
  __syncthreads();
  float total = 0.f;
  for (int w = 0; w < kWarps; ++w) total = fmaxf(total, scratch[w]);
  __syncthreads();  // scratch is free for the next call
  return total;
}

// Rounds an fp32 tile to the operand type T. fp16 has a narrow range, so its tiles are first scaled by
// a power of two that brings the largest magnitude into [2^14, 2^15): a long sequence's state cannot
// overflow and small gradients keep their bits. bf16 and fp32 keep scale 1. With `low`, the rounding
// remainder goes there (hi + lo carries 16 bits in bf16, 22 in fp16) for products whose result cancels
// against an fp32 term. Returns the inverse scale (exact), by which the caller multiplies every product
// with the tile.
template <typename T>
__device__ float to_operand(const float* src, int src_ld, T* dst, int ld, int rows, int cols, float* scratch,
                            T* low = nullptr) {
  float scale = 1.f;
  if constexpr (std::is_same_v<T, __half>) {
    const float largest = block_max_abs(src, src_ld, rows, cols, scratch);
    if (largest > 0.f && !isinf(largest)) {
      int exponent = 0;
      frexpf(largest, &exponent);  // largest < 2^exponent
      exponent = max(-40, min(40, exponent));
      scale = ldexpf(1.f, 15 - exponent);
    }
  }
  for (int e = threadIdx.x; e < rows * cols; e += blockDim.x) {
    const int r = e / cols, c = e % cols;
    const float x = src[r * src_ld + c] * scale;
    const T high = from_float<T>(x);
    dst[r * ld + c] = high;
    if (low != nullptr) low[r * ld + c] = from_float<T>(x - to_float(high));
  }
  return 1.f / scale;
}

// Which fragments of a product are known to vanish: kLowerA/kUpperA when `a` is lower/upper triangular
// (in 16-row blocks), kLowerOutput to skip output fragments above the diagonal (masked later anyway).
enum class Causal { kNone, kLowerA, kUpperA, kLowerOutput };

template <typename T>
struct Operand {
  using Element = T;
  static constexpr int kDepth = 16;
};
template <>
struct Operand<float> {
#if LINTF_TENSOR_CORES
  using Element = wmma::precision::tf32;
#else
  using Element = float;  // unused: block_mma traps before sm_80
#endif
  static constexpr int kDepth = 8;
};

#if LINTF_TENSOR_CORES
// acc += a b for TF32 fragments holding raw floats; Split adds the products with the rounding
// remainders (a_lo b_hi + a_hi b_lo), which recovers fp32 accuracy (3xTF32).
template <bool Split, typename FragA, typename FragB, typename FragC>
__device__ __forceinline__ void mma_tf32(FragC& acc, FragA& a, FragB& b) {
  FragA a_lo;
  FragB b_lo;
  for (int i = 0; i < a.num_elements; ++i) {
    const float hi = wmma::__float_to_tf32(a.x[i]);
    if constexpr (Split) a_lo.x[i] = wmma::__float_to_tf32(a.x[i] - hi);
    a.x[i] = hi;
  }
  for (int i = 0; i < b.num_elements; ++i) {
    const float hi = wmma::__float_to_tf32(b.x[i]);
    if constexpr (Split) b_lo.x[i] = wmma::__float_to_tf32(b.x[i] - hi);
    b.x[i] = hi;
  }
  if constexpr (Split) {
    wmma::mma_sync(acc, a_lo, b, acc);
    wmma::mma_sync(acc, a, b_lo, acc);
  }
  wmma::mma_sync(acc, a, b, acc);
}
#endif

// c (rows x cols, fp32) = keep * c + scale * (a b), or scale * (a b) when keep == 0 (c is not read).
// a is (rows x inner): element (r, i) at a[r * lda + i] when ARowMajor, else at a[i * lda + r] (a
// transposed tile). b is (inner x cols): (i, n) at b[i * ldb + n] when BRowMajor, else b[n * ldb + i];
// b_low, laid out like b, is b's rounding remainder (to_operand's `low`) when given: b = b + b_low
// (16-bit operands only; fp32 tiles get their accuracy from 3xTF32).
// Each warp owns whole 16 x 16 output fragments (fragment f belongs to warp f % kWarps, so calls with
// the same rows and cols give a warp the same fragments).
template <typename T, bool Split, bool ARowMajor, bool BRowMajor>
__device__ void block_mma(const T* a, int lda, const T* b, int ldb, float* c, int ldc, int rows, int cols,
                          int inner, Causal causal, float keep, float scale, const T* b_low = nullptr) {
#if LINTF_TENSOR_CORES
  using Element = typename Operand<T>::Element;
  constexpr int kDepth = Operand<T>::kDepth;
  using LayoutA = std::conditional_t<ARowMajor, wmma::row_major, wmma::col_major>;
  using LayoutB = std::conditional_t<BRowMajor, wmma::row_major, wmma::col_major>;
  wmma::fragment<wmma::matrix_a, 16, 16, kDepth, Element, LayoutA> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, kDepth, Element, LayoutB> fb;
  wmma::fragment<wmma::accumulator, 16, 16, kDepth, float> acc, old;
  const int col_blocks = cols / 16, fragments = (rows / 16) * col_blocks;
  for (int f = threadIdx.x / 32; f < fragments; f += kWarps) {
    const int r = f / col_blocks, n = f % col_blocks;
    if (causal == Causal::kLowerOutput && n > r) continue;
    const int begin = causal == Causal::kUpperA ? r * 16 : 0;
    const int end = causal == Causal::kLowerA ? min(inner, (r + 1) * 16) : inner;
    wmma::fill_fragment(acc, 0.f);
    for (int i = begin; i < end; i += kDepth) {
      const int b_offset = BRowMajor ? i * ldb + n * 16 : n * 16 * ldb + i;
      wmma::load_matrix_sync(fa, ARowMajor ? a + r * 16 * lda + i : a + i * lda + r * 16, lda);
      wmma::load_matrix_sync(fb, b + b_offset, ldb);
      if constexpr (std::is_same_v<T, float>) {
        mma_tf32<Split>(acc, fa, fb);
      } else {
        wmma::mma_sync(acc, fa, fb, acc);
        if (b_low != nullptr) {
          wmma::load_matrix_sync(fb, b_low + b_offset, ldb);
          wmma::mma_sync(acc, fa, fb, acc);
        }
      }
    }
    float* out = c + r * 16 * ldc + n * 16;
    if (keep != 0.f) {
      wmma::load_matrix_sync(old, out, ldc, wmma::mem_row_major);
      for (int i = 0; i < acc.num_elements; ++i) acc.x[i] = keep * old.x[i] + scale * acc.x[i];
    } else {
      for (int i = 0; i < acc.num_elements; ++i) acc.x[i] *= scale;
    }
    wmma::store_matrix_sync(out, acc, ldc, wmma::mem_row_major);
  }
#else
  __trap();
#endif
}

// dst[r * dst_ld + c] (global memory) <- src (rows x cols of an fp32 tile) rounded to Out.
template <typename Out>
__device__ void store_tile(const float* src, int ld, int rows, int cols, Out* dst, int64_t dst_ld) {
  for (int e = threadIdx.x; e < rows * cols; e += blockDim.x) {
    const int r = e / cols, c = e % cols;
    dst[r * dst_ld + c] = from_float<Out>(src[r * ld + c]);
  }
}

// The causal mask of a chunk's square fp32 (query x key) tile: entries above the diagonal (j > i) become
// zero, the others c_ij * row_scale[i] + add_to_row[i] (each factor left out when null).
__device__ inline void causal_mask(float* c, int ld, int n, const float* row_scale, const float* add_to_row) {
  for (int e = threadIdx.x; e < n * n; e += blockDim.x) {
    const int i = e / n, j = e % n;
    if (j > i) {
      c[i * ld + j] = 0.f;
    } else {
      const float x = row_scale != nullptr ? c[i * ld + j] * row_scale[i] : c[i * ld + j];
      c[i * ld + j] = add_to_row != nullptr ? x + add_to_row[i] : x;
    }
  }
}

}  // namespace tile
}  // namespace lintf
