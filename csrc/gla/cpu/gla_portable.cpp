// The portable vector path of the CPU gated linear attention: the build's baseline ISA with 16-byte
// vectors and 4-row register blocks, like the causal product's. Runs on every CPU the library loads on.
#define LINTF_PATH portable
#define LINTF_VECTOR_BYTES 16
#define LINTF_ROW_BLOCK 4
#include "gla/cpu/vector_path.h"
