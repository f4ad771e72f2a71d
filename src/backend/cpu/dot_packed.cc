// The AVX2 kernels of packed tiles: dot_packed_body.h with maddubs + madd.
#define LS_PACKED_TARGET
#define LS_PACKED_VNNI 0
#define LS_PACKED_NAME(type) packed_tile_##type
#include "backend/cpu/dot_packed_body.h"
