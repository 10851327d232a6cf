// Host stand-in for CUDA's cuda_bf16.h in the CPU emulation of the CUDA kernels (see cuda_emulation.h).
#pragma once

#include <c10/util/BFloat16.h>

using __nv_bfloat16 = c10::BFloat16;

inline float __bfloat162float(__nv_bfloat16 x) { return static_cast<float>(x); }
inline __nv_bfloat16 __float2bfloat16_rn(float x) { return __nv_bfloat16(x); }  // round to nearest even
