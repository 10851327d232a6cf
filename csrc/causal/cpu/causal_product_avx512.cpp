// The AVX-512 vector path of the CPU causal product: AVX-512F (+AVX2, FMA) with 64-byte vectors,
// 8 x 2-vector state tiles in the recurrence, 8-row register blocks (16 of the 32 vector registers)
// in the chunk sums. Selected at run time only on CPUs that report AVX-512F (common/cpu/cpu_path.cpp).
#define LINTF_PATH avx512
#define LINTF_TARGET "avx512f,avx2,fma"
#define LINTF_VECTOR_BYTES 64
#define LINTF_ROW_BLOCK 8
#include "causal/cpu/vector_path.h"
