// Opening and closing a region compiled for a wider x86-64 ISA than the build's baseline, for the
// vector-path translation units (causal_product_cpu_{avx2,avx512}.cpp, decayed_product_{avx2,avx512}.cpp):
//   LINTF_TARGET_BEGIN("avx2,fma")
//   #include "..._sweeps.h"
//   LINTF_TARGET_END
// GCC takes `#pragma GCC target` between push_options and pop_options; clang applies a target
// attribute to every function in the region.
#pragma once

#define LINTF_PRAGMA(...) _Pragma(#__VA_ARGS__)
#if defined(__clang__)
#define LINTF_TARGET_BEGIN(isa) LINTF_PRAGMA(clang attribute push(__attribute__((target(isa))), apply_to = function))
#define LINTF_TARGET_END LINTF_PRAGMA(clang attribute pop)
#else
#define LINTF_TARGET_BEGIN(isa) LINTF_PRAGMA(GCC push_options) LINTF_PRAGMA(GCC target(isa))
#define LINTF_TARGET_END LINTF_PRAGMA(GCC pop_options)
#endif
