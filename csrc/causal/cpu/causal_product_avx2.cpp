// The AVX2+FMA vector path of the CPU causal product: 32-byte vectors, 4 x 2-vector state tiles in
// the recurrence, 6-row register blocks (12 of the 16 vector registers) in the chunk sums. Selected
// at run time only on CPUs that report both (common/cpu/cpu_path.cpp).
#define LINTF_PATH avx2
#define LINTF_TARGET "avx2,fma"
#define LINTF_VECTOR_BYTES 32
#define LINTF_ROW_BLOCK 6
#include "causal/cpu/vector_path.h"
