// Tensor element types as GGUF numbers them (ggml_type), with their block geometry.
// Header-only and free of host-only code so that both g++ and nvcc include it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace llamaserve {

// Values are the on-disk type ids of GGUF; never renumber.
enum class TensorType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
};

struct TypeTraits {
  const char* name;
  uint32_t block_elems;    // elements per block (1 for plain types)
  uint32_t block_bytes;    // bytes per block
  bool weights_supported;  // the engine can compute with weights of this type
};

// Geometry of every type id a GGUF file may name; nullptr for ids this build does not know
// (the reader then refuses the file with the id in the message).
inline const TypeTraits* type_traits(uint32_t raw_type) {
  static constexpr TypeTraits kF32{"F32", 1, 4, true};
  static constexpr TypeTraits kF16{"F16", 1, 2, true};
  static constexpr TypeTraits kQ4_0{"Q4_0", 32, 18, true};
  static constexpr TypeTraits kQ4_1{"Q4_1", 32, 20, true};
  static constexpr TypeTraits kQ5_0{"Q5_0", 32, 22, false};
  static constexpr TypeTraits kQ5_1{"Q5_1", 32, 24, false};
  static constexpr TypeTraits kQ8_0{"Q8_0", 32, 34, true};
  static constexpr TypeTraits kQ8_1{"Q8_1", 32, 36, false};
  static constexpr TypeTraits kQ2_K{"Q2_K", 256, 84, false};
  static constexpr TypeTraits kQ3_K{"Q3_K", 256, 110, false};
  static constexpr TypeTraits kQ4_K{"Q4_K", 256, 144, true};
  static constexpr TypeTraits kQ5_K{"Q5_K", 256, 176, true};
  static constexpr TypeTraits kQ6_K{"Q6_K", 256, 210, true};
  static constexpr TypeTraits kQ8_K{"Q8_K", 256, 292, false};
  static constexpr TypeTraits kI8{"I8", 1, 1, false};
  static constexpr TypeTraits kI16{"I16", 1, 2, false};
  static constexpr TypeTraits kI32{"I32", 1, 4, false};
  static constexpr TypeTraits kI64{"I64", 1, 8, false};
  static constexpr TypeTraits kF64{"F64", 1, 8, false};
  static constexpr TypeTraits kBF16{"BF16", 1, 2, true};
  switch (static_cast<TensorType>(raw_type)) {
    case TensorType::F32: return &kF32;
    case TensorType::F16: return &kF16;
    case TensorType::Q4_0: return &kQ4_0;
    case TensorType::Q4_1: return &kQ4_1;
    case TensorType::Q5_0: return &kQ5_0;
    case TensorType::Q5_1: return &kQ5_1;
    case TensorType::Q8_0: return &kQ8_0;
    case TensorType::Q8_1: return &kQ8_1;
    case TensorType::Q2_K: return &kQ2_K;
    case TensorType::Q3_K: return &kQ3_K;
    case TensorType::Q4_K: return &kQ4_K;
    case TensorType::Q5_K: return &kQ5_K;
    case TensorType::Q6_K: return &kQ6_K;
    case TensorType::Q8_K: return &kQ8_K;
    case TensorType::I8: return &kI8;
    case TensorType::I16: return &kI16;
    case TensorType::I32: return &kI32;
    case TensorType::I64: return &kI64;
    case TensorType::F64: return &kF64;
    case TensorType::BF16: return &kBF16;
  }
  return nullptr;
}

inline const TypeTraits& traits(TensorType type) {
  return *type_traits(static_cast<uint32_t>(type));
}
inline const char* type_name(TensorType type) { return traits(type).name; }

// Bytes of a row of n_elems elements. PRECONDITION: n_elems % block_elems == 0.
inline size_t row_bytes(TensorType type, size_t n_elems) {
  const TypeTraits& t = traits(type);
  return n_elems / t.block_elems * t.block_bytes;
}

}  // namespace llamaserve
