// The portable vector path of the CPU causal product: the build's baseline ISA with 16-byte vectors
// (SSE2 on x86-64, NEON on aarch64), 4 x 2-vector state tiles in the recurrence, 4-row register
// blocks in the chunk sums. Runs on every CPU the library loads on.
#define LINTF_PATH portable
#define LINTF_VECTOR_BYTES 16
#define LINTF_ROW_BLOCK 4
#include "causal/cpu/vector_path.h"
