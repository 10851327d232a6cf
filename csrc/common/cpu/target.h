// Compiling one vector path of a CPU op for a wider x86-64 ISA than the build's baseline.
//
// An op's vector_path.h is instantiated once per path by a translation unit that defines, before
// including it:
//   LINTF_PATH          the path's name: avx512, avx2 or portable; its table is <name>_path()
//   LINTF_TARGET        the ISA of its target region, e.g. "avx2,fma"; absent for the portable path,
//                       which keeps the build's baseline (SSE2 on x86-64, NEON on aarch64)
//   LINTF_VECTOR_BYTES  64, 32 or 16: the width of the vectors the kernels compute on
//   LINTF_ROW_BLOCK     rows of the register block of tile::gemm (common/cpu/tile.h)
// The region opens with LINTF_PATH_BEGIN and closes with LINTF_PATH_END: GCC takes
// `#pragma GCC target` between push_options and pop_options, clang applies a target attribute to
// every function in it. The one torch extension build compiles every file with the same flags, so
// the ISA comes from the region, not from -m options; the rest of the library stays baseline and
// one build runs on any CPU of its architecture. An x86-64 path in a build for another
// architecture is not compiled (LINTF_PATH_COMPILED is 0) and its table is null.
#pragma once

#define LINTF_PRAGMA(...) _Pragma(#__VA_ARGS__)
#if defined(__clang__)
#define LINTF_TARGET_BEGIN(isa) LINTF_PRAGMA(clang attribute push(__attribute__((target(isa))), apply_to = function))
#define LINTF_TARGET_END LINTF_PRAGMA(clang attribute pop)
#else
#define LINTF_TARGET_BEGIN(isa) LINTF_PRAGMA(GCC push_options) LINTF_PRAGMA(GCC target(isa))
#define LINTF_TARGET_END LINTF_PRAGMA(GCC pop_options)
#endif

#if defined(LINTF_TARGET)
#define LINTF_PATH_BEGIN LINTF_TARGET_BEGIN(LINTF_TARGET)
#define LINTF_PATH_END LINTF_TARGET_END
#else
#define LINTF_PATH_BEGIN
#define LINTF_PATH_END
#endif

#if !defined(LINTF_TARGET) || defined(__x86_64__) || defined(_M_X64)
#define LINTF_PATH_COMPILED 1
#else
#define LINTF_PATH_COMPILED 0
#endif

#define LINTF_CONCAT_(a, b) a##b
#define LINTF_CONCAT(a, b) LINTF_CONCAT_(a, b)
#define LINTF_STRINGIFY_(x) #x
#define LINTF_STRINGIFY(x) LINTF_STRINGIFY_(x)
#define LINTF_PATH_TABLE LINTF_CONCAT(LINTF_PATH, _path)  // avx2 -> avx2_path
#define LINTF_PATH_NAME LINTF_STRINGIFY(LINTF_PATH)       // avx2 -> "avx2"
