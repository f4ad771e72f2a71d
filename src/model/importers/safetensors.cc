#include "model/importers/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "model/importers/json_input.h"

namespace llamaserve {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The reference implementation refuses headers above 100 MB; a real one is a few hundred KB.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
constexpr size_t kMaxRank = 8;
constexpr uint64_t kMaxIndexBytes = 64ull << 20;
constexpr size_t kMaxShards = 4096;

struct DtypeSize {
  std::string_view name;
  uint32_t bytes;
};
constexpr DtypeSize kDtypes[] = {
    {"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2},    {"I64", 8},
    {"I32", 4}, {"I16", 2}, {"I8", 1},   {"U64", 8},     {"U32", 4},
    {"U16", 2}, {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1},
};

Result<std::string> read_small_file(const std::string& path, uint64_t max_bytes) {
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  if (ec) return make_error(StatusCode::kNotFound, "cannot read '{}': {}", path, ec.message());
  if (size > max_bytes) {
    return make_error(StatusCode::kInvalidArgument, "'{}' is {} bytes, more than the {} allowed",
                      path, size, max_bytes);
  }
  std::ifstream in(path, std::ios::binary);
  std::string text(static_cast<size_t>(size), '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(size))) {
    return make_error(StatusCode::kIo, "cannot read '{}'", path);
  }
  return text;
}

}  // namespace

uint32_t safetensors_dtype_bytes(std::string_view dtype) {
  for (const DtypeSize& d : kDtypes) {
    if (d.name == dtype) return d.bytes;
  }
  return 0;
}

uint64_t SafetensorsTensor::n_elements() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  LS_ASSIGN_OR_RETURN(auto mapping, MappedFile::open(path));
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->mapping_ = std::move(mapping);
  Status status = file->parse_image(file->mapping_->data(), file->mapping_->size());
  if (!status.is_ok()) return status.with_context(fmt::format("safetensors file '{}'", path));
  return file;
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::parse(const uint8_t* data, size_t size,
                                                                const std::string& name) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = name;
  Status status = file->parse_image(data, size);
  if (!status.is_ok()) return status.with_context(fmt::format("safetensors file '{}'", name));
  return file;
}

Status SafetensorsFile::parse_image(const uint8_t* base, uint64_t size) {
  if (size < 8) {
    return make_error(StatusCode::kInvalidArgument,
                      "file is {} bytes, too short for the 8-byte header length", size);
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | base[i];
  if (header_len > kMaxHeaderBytes) {
    return make_error(StatusCode::kInvalidArgument,
                      "header length {} exceeds the {} byte limit (not a safetensors file?)",
                      header_len, kMaxHeaderBytes);
  }
  if (header_len > size - 8) {
    return make_error(StatusCode::kInvalidArgument,
                      "header length {} runs past the end of the {} byte file (truncated?)",
                      header_len, size);
  }
  const char* header_begin = reinterpret_cast<const char*>(base + 8);
  LS_RETURN_IF_ERROR(check_json_nesting(std::string_view(header_begin, header_len), "the header"));
  json header = json::parse(header_begin, header_begin + header_len, nullptr, false);
  if (header.is_discarded() || !header.is_object()) {
    return make_error(StatusCode::kInvalidArgument, "the {} byte header is not a JSON object",
                      header_len);
  }
  const uint8_t* data = base + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;

  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") continue;
    const json& entry = it.value();
    auto bad = [&](std::string_view what) {
      return make_error(StatusCode::kInvalidArgument, "tensor '{}': {}", name, what);
    };
    if (name.empty()) return bad("empty tensor name");
    if (!entry.is_object()) return bad("entry is not an object");
    const auto dtype_it = entry.find("dtype");
    const auto shape_it = entry.find("shape");
    const auto offsets_it = entry.find("data_offsets");
    if (dtype_it == entry.end() || !dtype_it->is_string()) return bad("'dtype' is not a string");
    if (shape_it == entry.end() || !shape_it->is_array()) return bad("'shape' is not an array");
    if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
        !(*offsets_it)[0].is_number_unsigned() || !(*offsets_it)[1].is_number_unsigned()) {
      return bad("'data_offsets' is not two non-negative integers");
    }
    SafetensorsTensor t;
    t.name = name;
    t.file = path_;
    t.dtype = dtype_it->get<std::string>();
    const uint32_t elem_bytes = safetensors_dtype_bytes(t.dtype);
    if (elem_bytes == 0) return bad(fmt::format("unknown dtype '{}'", t.dtype));
    if (shape_it->size() > kMaxRank)
      return bad(fmt::format("rank {} > {}", shape_it->size(), kMaxRank));
    unsigned __int128 n_elements = 1;
    for (const json& dim : *shape_it) {
      if (!dim.is_number_unsigned()) return bad("shape entries must be non-negative integers");
      const uint64_t d = dim.get<uint64_t>();
      if (d > (1ull << 40)) return bad(fmt::format("dimension {} is implausibly large", d));
      t.shape.push_back(static_cast<int64_t>(d));
      n_elements *= d;
      if (n_elements > (static_cast<unsigned __int128>(1) << 62)) return bad("too many elements");
    }
    const uint64_t begin = (*offsets_it)[0].get<uint64_t>();
    const uint64_t end = (*offsets_it)[1].get<uint64_t>();
    if (begin > end || end > data_size) {
      return bad(
          fmt::format("data_offsets [{}, {}] lie outside the {} byte data section "
                      "(truncated file?)",
                      begin, end, data_size));
    }
    const unsigned __int128 expected = n_elements * elem_bytes;
    if (expected != end - begin) {
      return bad(fmt::format("{} {} elements need {} bytes but data_offsets span {}", t.dtype,
                             static_cast<uint64_t>(n_elements), static_cast<uint64_t>(expected),
                             end - begin));
    }
    t.data = data + begin;
    t.n_bytes = end - begin;
    if (t.n_bytes > 0) ranges.emplace_back(begin, end);
    tensors_.emplace(name, std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) {
      return make_error(StatusCode::kInvalidArgument,
                        "tensor data ranges [{}, {}) and [{}, {}) overlap", ranges[i - 1].first,
                        ranges[i - 1].second, ranges[i].first, ranges[i].second);
    }
  }
  return Status::ok();
}

Result<SafetensorsIndex> parse_safetensors_index(std::string_view json_text) {
  LS_RETURN_IF_ERROR(check_json_nesting(json_text, "the index"));
  json index = json::parse(json_text, nullptr, false);
  if (index.is_discarded() || !index.is_object() || !index.contains("weight_map") ||
      !index["weight_map"].is_object()) {
    return make_error(StatusCode::kInvalidArgument, "not JSON with a \"weight_map\" object");
  }
  SafetensorsIndex out;
  std::set<std::string> unique;
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    if (!it.value().is_string()) {
      return make_error(StatusCode::kInvalidArgument, "weight_map['{}'] is not a string", it.key());
    }
    const std::string shard = it.value().get<std::string>();
    // Shards are plain file names next to the index; anything else could escape the
    // directory.
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..") {
      return make_error(StatusCode::kInvalidArgument, "shard name '{}' is not a plain file name",
                        shard);
    }
    out.weight_map[it.key()] = shard;
    if (unique.insert(shard).second) out.shards.push_back(shard);
  }
  if (out.shards.empty() || out.shards.size() > kMaxShards) {
    return make_error(StatusCode::kInvalidArgument, "the index lists {} shards (1 to {} allowed)",
                      out.shards.size(), kMaxShards);
  }
  return out;
}

Result<SafetensorsCheckpoint> SafetensorsCheckpoint::open_dir(const std::string& dir) {
  SafetensorsCheckpoint ckpt;
  const fs::path root(dir);
  const fs::path index_path = root / "model.safetensors.index.json";
  std::error_code ec;
  std::map<std::string, std::string> weight_map;  // tensor -> shard file name
  std::vector<std::string> shard_names;
  if (fs::exists(index_path, ec)) {
    LS_ASSIGN_OR_RETURN(std::string text, read_small_file(index_path.string(), kMaxIndexBytes));
    Result<SafetensorsIndex> index = parse_safetensors_index(text);
    if (!index.is_ok()) return index.status().with_context(index_path.string());
    weight_map = std::move(index->weight_map);
    shard_names = std::move(index->shards);
  } else if (fs::exists(root / "model.safetensors", ec)) {
    shard_names.push_back("model.safetensors");
  } else {
    for (const auto& entry : fs::directory_iterator(root, ec)) {
      if (entry.path().extension() == ".safetensors") {
        shard_names.push_back(entry.path().filename().string());
      }
    }
    if (ec) return make_error(StatusCode::kNotFound, "cannot list '{}': {}", dir, ec.message());
    if (shard_names.size() != 1) {
      const bool pickle = fs::exists(root / "pytorch_model.bin", ec) ||
                          fs::exists(root / "pytorch_model.bin.index.json", ec);
      return make_error(StatusCode::kNotFound,
                        "'{}' has {} *.safetensors files and no model.safetensors.index.json "
                        "(expected model.safetensors, or shards with an index){}",
                        dir, shard_names.size(),
                        pickle ? "; PyTorch pickle checkpoints (pytorch_model.bin) are not read: "
                                 "save the model with safe_serialization=True"
                               : "");
    }
  }

  std::map<std::string, const SafetensorsFile*> by_name;
  for (const std::string& shard : shard_names) {
    LS_ASSIGN_OR_RETURN(auto file, SafetensorsFile::open((root / shard).string()));
    by_name[shard] = file.get();
    for (const auto& [name, tensor] : file->tensors()) {
      if (!ckpt.index_.emplace(name, &tensor).second) {
        return make_error(StatusCode::kInvalidArgument,
                          "tensor '{}' appears in two shards (second: {})", name, shard);
      }
    }
    ckpt.files_.push_back(std::move(file));
  }
  for (const auto& [tensor, shard] : weight_map) {
    const auto& in_shard = by_name.at(shard)->tensors();
    if (in_shard.find(tensor) == in_shard.end()) {
      return make_error(StatusCode::kInvalidArgument,
                        "the index lists tensor '{}' in '{}', but that file does not hold it",
                        tensor, shard);
    }
  }
  return ckpt;
}

const SafetensorsTensor* SafetensorsCheckpoint::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

}  // namespace llamaserve
