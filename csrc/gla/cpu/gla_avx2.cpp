// The AVX2+FMA vector path of the CPU gated linear attention: 32-byte vectors and 6-row register
// blocks, like the causal product's (causal/cpu/causal_product_avx2.cpp).
#define LINTF_PATH avx2
#define LINTF_TARGET "avx2,fma"
#define LINTF_VECTOR_BYTES 32
#define LINTF_ROW_BLOCK 6
#include "gla/cpu/vector_path.h"
