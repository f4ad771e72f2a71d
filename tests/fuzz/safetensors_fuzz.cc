// libFuzzer target for the safetensors readers (model/importers/safetensors.h). Every input is
// read both as a .safetensors file image and as the text of a model.safetensors.index.json.
// Besides "never crash, never read out of bounds, never throw" (an escaping exception aborts),
// it checks what the header documents for every input the readers accept:
//   - each tensor has a name, a known dtype, rank <= 8, n_bytes = elements x element size, and
//     its bytes lie inside the data section after the header (all of them are read);
//   - no two tensors' byte ranges overlap;
//   - an index lists 1 to 4096 distinct plain shard names (no '/', not "." or ".."), and every
//     tensor of its weight_map maps to one of them.
// A violated property aborts, which libFuzzer reports as a crash with the input saved.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/importers/safetensors.h"

namespace llamaserve {
namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "safetensors_fuzz property violated: %s\n", what);
  std::abort();
}

void check(bool condition, const char* what) {
  if (!condition) fail(what);
}

void check_file(const uint8_t* data, size_t size) {
  auto parsed = SafetensorsFile::parse(data, size, "fuzz.safetensors");
  if (!parsed.is_ok()) {
    check(!parsed.status().message().empty(), "error without a message");
    return;
  }
  // Accepted: the 8-byte length and the header come before any tensor byte.
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | data[i];
  const uint8_t* data_begin = data + 8 + header_len;
  const uint8_t* end = data + size;
  std::vector<std::pair<const uint8_t*, const uint8_t*>> ranges;
  volatile uint64_t sink = 0;
  for (const auto& [name, t] : (*parsed)->tensors()) {
    check(!name.empty() && name == t.name, "tensor name");
    const uint32_t elem_bytes = safetensors_dtype_bytes(t.dtype);
    check(elem_bytes > 0, "unknown dtype accepted");
    check(t.shape.size() <= 8, "rank above 8 accepted");
    for (int64_t d : t.shape) check(d >= 0, "negative dimension");
    check(t.n_bytes == t.n_elements() * elem_bytes, "n_bytes differs from the shape");
    check(t.data >= data_begin && t.data <= end && t.n_bytes <= static_cast<uint64_t>(end - t.data),
          "tensor bytes outside the data section");
    for (uint64_t i = 0; i < t.n_bytes; ++i) sink = sink + t.data[i];
    if (t.n_bytes > 0) ranges.emplace_back(t.data, t.data + t.n_bytes);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    check(ranges[i].first >= ranges[i - 1].second, "overlapping tensors accepted");
  }
}

void check_index(std::string_view text) {
  auto index = parse_safetensors_index(text);
  if (!index.is_ok()) {
    check(!index.status().message().empty(), "error without a message");
    return;
  }
  const std::set<std::string> shards(index->shards.begin(), index->shards.end());
  check(!shards.empty() && shards.size() <= 4096, "shard count outside [1, 4096]");
  check(shards.size() == index->shards.size(), "a shard is listed twice");
  for (const std::string& shard : shards) {
    check(!shard.empty() && shard.find('/') == std::string::npos && shard != "." && shard != "..",
          "shard name that is not a plain file name");
  }
  for (const auto& [tensor, shard] : index->weight_map) {
    check(shards.count(shard) == 1, "weight_map names a shard missing from the list");
  }
}

}  // namespace
}  // namespace llamaserve

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  llamaserve::check_file(data, size);
  llamaserve::check_index(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
