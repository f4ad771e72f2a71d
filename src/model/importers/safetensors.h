// Reader for Hugging Face safetensors checkpoints: one file, or shards listed by
// model.safetensors.index.json. The files are untrusted input: every header field is
// checked before a tensor's bytes are handed out, and the data stays mmap'd.
//
// File layout: u64 little-endian N | N bytes of JSON header | data. The header maps each
// tensor name to {"dtype": "F16", "shape": [rows, cols], "data_offsets": [begin, end]}
// (offsets relative to the start of the data), plus an optional "__metadata__" object of
// strings. Shapes are row-major with the contiguous axis last.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/mapped_file.h"
#include "core/status.h"

namespace llamaserve {

struct SafetensorsTensor {
  std::string name;
  std::string dtype;           // as written: "F32", "F16", "BF16", "I64", ...
  std::vector<int64_t> shape;  // row-major, contiguous axis last
  const uint8_t* data = nullptr;
  uint64_t n_bytes = 0;
  std::string file;  // path of the file holding it (for messages)

  uint64_t n_elements() const;
};

class SafetensorsFile {
 public:
  // Maps and validates the whole header: sizes, dtypes, shapes, offsets inside the data
  // section, byte counts that match shape × element size, no overlaps.
  static Result<std::unique_ptr<SafetensorsFile>> open(const std::string& path);

  // The same checks on a file image in memory (tests, fuzzing); `data` must outlive the
  // result, whose tensors point into it. `name` stands for the path in messages.
  static Result<std::unique_ptr<SafetensorsFile>> parse(const uint8_t* data, size_t size,
                                                        const std::string& name);

  const std::string& path() const { return path_; }
  const std::map<std::string, SafetensorsTensor, std::less<>>& tensors() const { return tensors_; }

 private:
  SafetensorsFile() = default;
  Status parse_image(const uint8_t* base, uint64_t size);

  std::string path_;
  std::unique_ptr<MappedFile> mapping_;  // null when parsed from caller-owned memory
  std::map<std::string, SafetensorsTensor, std::less<>> tensors_;
};

// model.safetensors.index.json: which shard file holds each tensor.
struct SafetensorsIndex {
  std::map<std::string, std::string> weight_map;  // tensor name -> shard file name
  std::vector<std::string> shards;                // distinct shard names, first-seen order
};

// Parses the text of an index. Shard names must be plain file names (no '/', not "." or
// ".."), so that a hostile index cannot point outside the checkpoint directory.
Result<SafetensorsIndex> parse_safetensors_index(std::string_view json_text);

// All tensors of a checkpoint directory: model.safetensors, or the shards that
// model.safetensors.index.json names (every tensor of its weight_map must be in the shard it
// is listed for), or, failing both, the single *.safetensors file of the directory.
class SafetensorsCheckpoint {
 public:
  static Result<SafetensorsCheckpoint> open_dir(const std::string& dir);

  const SafetensorsTensor* find(std::string_view name) const;
  // Every tensor, by name.
  const std::map<std::string, const SafetensorsTensor*, std::less<>>& tensors() const {
    return index_;
  }
  size_t n_files() const { return files_.size(); }

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsTensor*, std::less<>> index_;
};

// Bytes per element of a safetensors dtype name; 0 for names this reader does not know.
uint32_t safetensors_dtype_bytes(std::string_view dtype);

}  // namespace llamaserve
