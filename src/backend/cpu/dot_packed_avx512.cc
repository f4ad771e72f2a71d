// The AVX-512 VNNI kernels of packed tiles: dot_packed_body.h with vpdpbusd. The entry points
// are plain functions (no target attribute, so that their declarations in packed_weight.h are
// ordinary ones); each passes straight on to its AVX-512 body.
// First: it includes immintrin.h in its own way (see there).
#include "backend/cpu/simd_avx512.h"

#define LS_PACKED_TARGET LS_AVX512
#define LS_PACKED_VNNI 1
#define LS_PACKED_NAME(type) packed_tile_##type##_avx512
#include "backend/cpu/dot_packed_body.h"
