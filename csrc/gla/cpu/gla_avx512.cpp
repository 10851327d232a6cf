// The AVX-512 vector path of the CPU gated linear attention: 64-byte vectors and 8-row register
// blocks, like the causal product's (causal/cpu/causal_product_avx512.cpp).
#define LINTF_PATH avx512
#define LINTF_TARGET "avx512f,avx2,fma"
#define LINTF_VECTOR_BYTES 64
#define LINTF_ROW_BLOCK 8
#include "gla/cpu/vector_path.h"
