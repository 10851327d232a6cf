// Packing of a chunk's input rows into padded fp32/fp64 tiles, and their transposes, for the CPU
// ops' sweeps. Compiled once per vector path, inside its target region; internal linkage throughout.
//
// A chunk is kChunk consecutive positions of one (batch, head). Its rows are used in place when
// they already form a tile (fp32/fp64, full chunk, feature width a multiple of the register
// block), else packed into zero-padded tiles, so the kernels run on full tiles and padded
// rows/columns contribute exact zeros.
#pragma once

#include "common/cpu/layout.h"

namespace lintf::cpu {
namespace {

#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12)
#define LINTF_HAS_SHUFFLEVECTOR 1
// dst (8 x 8, stride ldd) = transpose of src (8 x 8, stride lds), in registers: 24 shuffles.
inline void transpose8x8(const float* src, int64_t lds, float* dst, int64_t ldd) {
  typedef float V8 __attribute__((vector_size(32)));
  V8 r[8], t[8], u[8];
  for (int i = 0; i < 8; ++i) std::memcpy(&r[i], src + i * lds, sizeof(V8));
  for (int i = 0; i < 8; i += 2) {  // interleave row pairs
    t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  for (int i = 0; i < 8; i += 4) {  // then pairs of pairs
    u[i] = __builtin_shufflevector(t[i], t[i + 2], 0, 1, 8, 9, 4, 5, 12, 13);
    u[i + 1] = __builtin_shufflevector(t[i], t[i + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    u[i + 2] = __builtin_shufflevector(t[i + 1], t[i + 3], 0, 1, 8, 9, 4, 5, 12, 13);
    u[i + 3] = __builtin_shufflevector(t[i + 1], t[i + 3], 2, 3, 10, 11, 6, 7, 14, 15);
  }
  for (int i = 0; i < 4; ++i) {  // then 128-bit halves
    const V8 low = __builtin_shufflevector(u[i], u[i + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    const V8 high = __builtin_shufflevector(u[i], u[i + 4], 4, 5, 6, 7, 12, 13, 14, 15);
    std::memcpy(dst + i * ldd, &low, sizeof(V8));
    std::memcpy(dst + (i + 4) * ldd, &high, sizeof(V8));
  }
}
#endif

// Writes the transpose (cols x rows) of a dense rows x cols matrix.
template <typename T>
void transpose(const T* src, int64_t rows, int64_t cols, T* dst) {
#ifdef LINTF_HAS_SHUFFLEVECTOR
  if constexpr (std::is_same_v<T, float>) {
    if (rows % 8 == 0 && cols % 8 == 0) {
      for (int64_t c0 = 0; c0 < cols; c0 += 8) {
        for (int64_t r0 = 0; r0 < rows; r0 += 8) transpose8x8(src + r0 * cols + c0, cols, dst + c0 * rows + r0, rows);
      }
      return;
    }
  }
#endif
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
  }
}

// Writes the transpose (ld x kChunk) of a kChunk x ld tile.
template <typename T>
void transpose(const T* src, int64_t ld, T* dst) {
  transpose(src, kChunk, ld, dst);
}

// A chunk's `rows` rows of a contiguous (rows x cols) slice as a kChunk x ld tile: the input
// itself when it already has that layout (accumulation dtype, full chunk, no padding), else a
// zero-padded copy in buf. When dst_t is given, the tile's transpose
// (ld x kChunk) goes there.
template <typename scalar_t, typename T>
const T* pack(const scalar_t* src, int64_t rows, int64_t cols, int64_t ld, T* buf, T* dst_t) {
  const T* tile = buf;
  if constexpr (std::is_same_v<scalar_t, T>) {
    if (rows == kChunk && cols == ld) tile = src;
  }
  if (tile == buf) {
    for (int64_t r = 0; r < rows; ++r) {
      const scalar_t* in = src + r * cols;
      T* out = buf + r * ld;
      for (int64_t c = 0; c < cols; ++c) out[c] = static_cast<T>(in[c]);
      std::fill(out + cols, out + ld, T(0));
    }
    std::fill(buf + rows * ld, buf + kChunk * ld, T(0));
  }
  if (dst_t != nullptr) transpose(tile, ld, dst_t);
  return tile;
}

}  // namespace
}  // namespace lintf::cpu
