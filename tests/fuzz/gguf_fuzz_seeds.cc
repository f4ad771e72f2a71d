// Writes the seed corpus of gguf_fuzz: small valid GGUF files (each under 4 KB) that between
// them use every value type, string arrays, several tensor types and alignments, and v2.
//   gguf_fuzz_seeds OUT_DIR
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace llamaserve {
namespace {

std::vector<uint8_t> filler(size_t n_bytes, uint8_t seed) {
  std::vector<uint8_t> bytes(n_bytes);
  for (size_t i = 0; i < n_bytes; ++i) bytes[i] = static_cast<uint8_t>(seed + 3 * i);
  return bytes;
}

GgufValue scalar(GgufValueType type, uint64_t v) { return GgufValue{type, v}; }
GgufValue signed_scalar(GgufValueType type, int64_t v) { return GgufValue{type, v}; }

GgufValue int_array(GgufValueType elem, std::vector<int64_t> ints) {
  GgufArray array;
  array.elem_type = elem;
  array.ints = std::move(ints);
  return GgufValue{GgufValueType::ARRAY, std::move(array)};
}

Status add(GgufWriter& writer, const char* name, TensorType type, std::vector<uint64_t> dims,
           uint8_t seed) {
  uint64_t n_elements = 1;
  for (uint64_t d : dims) n_elements *= d;
  const TypeTraits& t = traits(type);
  return writer.add_tensor(name, type, std::move(dims),
                           filler(n_elements / t.block_elems * t.block_bytes, seed));
}

Status save(const GgufWriter& writer, const std::string& dir, const char* name,
            bool as_v2 = false) {
  LS_ASSIGN_OR_RETURN(std::vector<uint8_t> image, writer.to_bytes());
  if (image.size() >= 4096) {
    return make_error(StatusCode::kInternal, "seed {} has {} bytes; keep seeds under 4 KB", name,
                      image.size());
  }
  if (as_v2) image[4] = 2;  // v2 and v3 share the layout
  const std::string path = dir + "/" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return make_error(StatusCode::kIo, "cannot create '{}'", path);
  const bool ok = std::fwrite(image.data(), 1, image.size(), f) == image.size();
  if (std::fclose(f) != 0 || !ok) return make_error(StatusCode::kIo, "cannot write '{}'", path);
  std::printf("%s: %zu bytes\n", path.c_str(), image.size());
  return Status::ok();
}

Status write_seeds(const std::string& dir) {
  using T = GgufValueType;
  {
    GgufWriter empty;
    LS_RETURN_IF_ERROR(save(empty, dir, "empty.gguf"));
  }
  {
    GgufWriter scalars;
    scalars.set_string("general.architecture", "llama");
    scalars.set("s.u8", scalar(T::UINT8, 7));
    scalars.set("s.i8", signed_scalar(T::INT8, -7));
    scalars.set("s.u16", scalar(T::UINT16, 700));
    scalars.set("s.i16", signed_scalar(T::INT16, -700));
    scalars.set_u32("s.u32", 70000);
    scalars.set_i32("s.i32", -70000);
    scalars.set_u64("s.u64", 1ull << 40);
    scalars.set("s.i64", signed_scalar(T::INT64, -(1ll << 40)));
    scalars.set_f32("s.f32", 0.25f);
    scalars.set("s.f64", GgufValue{T::FLOAT64, 1e-3});
    scalars.set_bool("s.bool", true);
    scalars.set_string("s.str", "text");
    LS_RETURN_IF_ERROR(save(scalars, dir, "scalars.gguf"));
  }
  {
    GgufWriter arrays;
    arrays.set_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "a", "b", "ab"});
    arrays.set_f32_array("tokenizer.ggml.scores", {0, 0, 0, -1, -2, -3});
    arrays.set_i32_array("tokenizer.ggml.token_type", {2, 3, 3, 1, 1, 1});
    arrays.set_string_array("tokenizer.ggml.merges", {"a b"});
    arrays.set("a.u8", int_array(T::UINT8, {1, 2, 3}));
    arrays.set("a.bool", int_array(T::BOOL, {1, 0}));
    arrays.set("a.u64", int_array(T::UINT64, {-1, 5}));
    arrays.set("a.i16", int_array(T::INT16, {-5, 5}));
    LS_RETURN_IF_ERROR(save(arrays, dir, "arrays.gguf"));
  }
  {
    GgufWriter tensors;
    tensors.set_string("general.architecture", "llama");
    tensors.set_u32("llama.block_count", 1);
    LS_RETURN_IF_ERROR(add(tensors, "token_embd.weight", TensorType::Q8_0, {32, 4}, 1));
    LS_RETURN_IF_ERROR(add(tensors, "output_norm.weight", TensorType::F32, {32}, 2));
    LS_RETURN_IF_ERROR(add(tensors, "blk.0.attn_q.weight", TensorType::Q4_1, {32, 2}, 3));
    LS_RETURN_IF_ERROR(add(tensors, "blk.0.ffn_up.weight", TensorType::Q4_K, {256, 1}, 4));
    LS_RETURN_IF_ERROR(add(tensors, "f16", TensorType::F16, {3, 2, 2}, 5));
    LS_RETURN_IF_ERROR(save(tensors, dir, "tensors.gguf"));
  }
  {
    GgufWriter aligned(64);
    aligned.set_string("general.architecture", "llama");
    LS_RETURN_IF_ERROR(add(aligned, "a", TensorType::BF16, {5}, 6));
    LS_RETURN_IF_ERROR(add(aligned, "b", TensorType::Q6_K, {256}, 7));
    LS_RETURN_IF_ERROR(save(aligned, dir, "aligned64.gguf"));
  }
  {
    GgufWriter v2(8);
    v2.set_string("general.name", "v2");
    LS_RETURN_IF_ERROR(add(v2, "i8", TensorType::I8, {3}, 8));
    LS_RETURN_IF_ERROR(add(v2, "q5k", TensorType::Q5_K, {256}, 9));
    LS_RETURN_IF_ERROR(save(v2, dir, "version2.gguf", /*as_v2=*/true));
  }
  return Status::ok();
}

}  // namespace
}  // namespace llamaserve

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  llamaserve::Status status = llamaserve::write_seeds(argv[1]);
  if (!status.is_ok()) {
    std::fprintf(stderr, "%s\n", status.to_string().c_str());
    return 1;
  }
  return 0;
}
