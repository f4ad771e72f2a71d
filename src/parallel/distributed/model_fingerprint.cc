#include "parallel/distributed/model_fingerprint.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <string_view>

namespace llamaserve {
namespace {

constexpr size_t kWindowBytes = 4096;

class Fnv1a {
 public:
  void bytes(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < n; ++i) hash_ = (hash_ ^ p[i]) * 0x100000001b3ull;
  }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      const auto b = static_cast<uint8_t>(v >> (8 * i));
      bytes(&b, 1);
    }
  }
  void text(std::string_view s) {
    u64(s.size());
    bytes(s.data(), s.size());
  }
  void f64(double v) { u64(std::bit_cast<uint64_t>(v)); }
  uint64_t value() const { return hash_; }

 private:
  uint64_t hash_ = 0xcbf29ce484222325ull;
};

void hash_value(Fnv1a& h, const GgufValue& value) {
  h.u64(static_cast<uint64_t>(value.type));
  if (const auto* u = std::get_if<uint64_t>(&value.data)) h.u64(*u);
  if (const auto* i = std::get_if<int64_t>(&value.data)) h.u64(static_cast<uint64_t>(*i));
  if (const auto* f = std::get_if<double>(&value.data)) h.f64(*f);
  if (const auto* b = std::get_if<bool>(&value.data)) h.u64(*b ? 1 : 0);
  if (const auto* s = std::get_if<std::string>(&value.data)) h.text(*s);
  if (const auto* a = std::get_if<GgufArray>(&value.data)) {
    h.u64(static_cast<uint64_t>(a->elem_type));
    h.u64(a->ints.size());
    for (int64_t v : a->ints) h.u64(static_cast<uint64_t>(v));
    h.u64(a->floats.size());
    for (double v : a->floats) h.f64(v);
    h.u64(a->strings.size());
    for (const std::string& s : a->strings) h.text(s);
  }
}

}  // namespace

uint64_t model_fingerprint(const LoadedModel& model) {
  const GgufFile& file = *model.file;
  Fnv1a h;
  h.u64(file.version());
  h.u64(file.metadata().size());
  for (const auto& [key, value] : file.metadata()) {
    h.text(key);
    hash_value(h, value);
  }
  h.u64(file.tensors().size());
  for (const GgufTensorInfo& info : file.tensors()) {
    h.text(info.name);
    h.u64(static_cast<uint64_t>(info.type));
    h.u64(info.dims.size());
    for (uint64_t d : info.dims) h.u64(d);
    h.u64(info.offset);
    h.u64(info.n_bytes);
    const uint8_t* data = file.tensor_data(info);
    const size_t n = static_cast<size_t>(info.n_bytes);
    const size_t window = std::min(n, kWindowBytes);
    for (const size_t at : {size_t{0}, (n - window) / 2, n - window}) h.bytes(data + at, window);
  }
  return h.value();
}

}  // namespace llamaserve
