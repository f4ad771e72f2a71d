// libFuzzer target for the GGUF reader. Besides "never crash, never read out of bounds"
// (ASan/UBSan), it checks properties of every file the reader accepts:
//   - each tensor lies inside the input, aligned, and lookups return the parsed entries;
//   - writing the parsed file back with GgufWriter and parsing that gives the same metadata
//     and tensor bytes.
// A violated property aborts, which libFuzzer reports as a crash with the input saved.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "gguf/gguf.h"

namespace llamaserve {
namespace {

// Largest alignment for the write-back check: the writer pads to it, and an alignment of
// 2^31 would make a 2 GiB image from a few bytes of input.
constexpr uint64_t kMaxRewriteAlignment = 4096;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "gguf_fuzz property violated: %s\n", what);
  std::abort();
}

void check(bool condition, const char* what) {
  if (!condition) fail(what);
}

bool same_double(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof(double)) == 0;
}

bool same_value(const GgufValue& a, const GgufValue& b) {
  if (a.type != b.type || a.data.index() != b.data.index()) return false;
  if (const auto* da = std::get_if<double>(&a.data))
    return same_double(*da, std::get<double>(b.data));
  if (const auto* aa = std::get_if<GgufArray>(&a.data)) {
    const GgufArray& ab = std::get<GgufArray>(b.data);
    if (aa->elem_type != ab.elem_type || aa->ints != ab.ints || aa->strings != ab.strings ||
        aa->floats.size() != ab.floats.size()) {
      return false;
    }
    for (size_t i = 0; i < aa->floats.size(); ++i) {
      if (!same_double(aa->floats[i], ab.floats[i])) return false;
    }
    return true;
  }
  if (const auto* u = std::get_if<uint64_t>(&a.data)) return *u == std::get<uint64_t>(b.data);
  if (const auto* i = std::get_if<int64_t>(&a.data)) return *i == std::get<int64_t>(b.data);
  if (const auto* flag = std::get_if<bool>(&a.data)) return *flag == std::get<bool>(b.data);
  return *a.as_string() == *b.as_string();
}

// Reads every part of a value so that a bad pointer or length inside it surfaces under ASan.
uint64_t touch(const GgufValue& value) {
  uint64_t sum = static_cast<uint32_t>(value.type);
  if (auto i = value.as_int()) sum += static_cast<uint64_t>(*i);
  if (auto f = value.as_float()) sum += std::isfinite(*f) ? 1 : 2;
  if (auto b = value.as_bool()) sum += *b;
  if (const std::string* s = value.as_string()) {
    for (char c : *s) sum += static_cast<uint8_t>(c);
  }
  if (const GgufArray* array = value.as_array()) {
    check(array->elem_type != GgufValueType::ARRAY, "nested array accepted");
    sum += array->size();
    for (int64_t i : array->ints) sum += static_cast<uint64_t>(i);
    for (double f : array->floats) sum += std::isnan(f) ? 3 : 4;
    for (const std::string& s : array->strings) {
      for (char c : s) sum += static_cast<uint8_t>(c);
    }
  }
  return sum;
}

void check_rewrite(const GgufFile& file) {
  if (file.alignment() > kMaxRewriteAlignment) return;
  GgufWriter writer(file.alignment());
  for (const auto& [key, value] : file.metadata()) writer.set(key, value);
  for (const GgufTensorInfo& info : file.tensors()) {
    // The writer refuses names llama.cpp would refuse (empty, 64+ bytes); the reader does not.
    if (info.name.empty() || info.name.size() > 63) return;
    const uint8_t* data = file.tensor_data(info);
    Status status = writer.add_tensor(info.name, info.type, info.dims,
                                      std::vector<uint8_t>(data, data + info.n_bytes));
    check(status.is_ok(), "writer refused a tensor the reader accepted");
  }
  auto image = writer.to_bytes();
  check(image.is_ok(), "writer refused metadata the reader accepted");
  auto reread = GgufFile::parse(image->data(), image->size());
  check(reread.is_ok(), "reader refused the writer's image");
  const GgufFile& copy = **reread;
  check(copy.alignment() == file.alignment(), "alignment changed");
  check(copy.metadata().size() == file.metadata().size(), "metadata count changed");
  for (const auto& [key, value] : file.metadata()) {
    const GgufValue* other = copy.find(key);
    check(other != nullptr && same_value(value, *other), "metadata value changed");
  }
  check(copy.tensors().size() == file.tensors().size(), "tensor count changed");
  for (size_t i = 0; i < file.tensors().size(); ++i) {
    const GgufTensorInfo& a = file.tensors()[i];
    const GgufTensorInfo& b = copy.tensors()[i];
    check(a.name == b.name && a.type == b.type && a.dims == b.dims && a.n_bytes == b.n_bytes,
          "tensor info changed");
    check(std::memcmp(file.tensor_data(a), copy.tensor_data(b), a.n_bytes) == 0,
          "tensor bytes changed");
  }
}

}  // namespace
}  // namespace llamaserve

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace llamaserve;
  auto parsed = GgufFile::parse(data, size);
  if (!parsed.is_ok()) {
    llamaserve::check(!parsed.status().message().empty(), "error without a message");
    return 0;
  }
  const GgufFile& file = **parsed;
  volatile uint64_t sink = file.version() + file.alignment() + file.data_offset();
  for (const auto& [key, value] : file.metadata()) {
    llamaserve::check(file.find(key) == &value, "find() does not return the parsed entry");
    sink = sink + key.size() + touch(value);
  }
  for (const GgufTensorInfo& info : file.tensors()) {
    llamaserve::check(file.find_tensor(info.name) == &info, "find_tensor() mismatch");
    llamaserve::check(info.offset % file.alignment() == 0, "unaligned tensor accepted");
    llamaserve::check(info.n_bytes > 0 && file.data_offset() + info.offset + info.n_bytes <= size,
                      "tensor outside the input accepted");
    const uint8_t* bytes = file.tensor_data(info);
    sink = sink + bytes[0] + bytes[info.n_bytes - 1] + info.n_rows();
  }
  check_rewrite(file);
  return 0;
}
