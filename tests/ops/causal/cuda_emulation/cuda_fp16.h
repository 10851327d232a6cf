// Host stand-in for CUDA's cuda_fp16.h in the CPU emulation of the CUDA kernels (see cuda_emulation.h).
#pragma once

#include <c10/util/Half.h>

using __half = c10::Half;

inline float __half2float(__half x) { return static_cast<float>(x); }
inline __half __float2half_rn(float x) { return __half(x); }  // round to nearest even, as on the GPU
