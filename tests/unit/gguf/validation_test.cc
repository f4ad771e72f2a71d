// One test per reader validation: each starts from a valid image made by the writer,
// corrupts a few bytes, and checks that the error is specific (code, and a message naming
// the field, the offset, the key or the tensor).
#include <gtest/gtest.h>

#include "gguf/gguf.h"
#include "gguf_test_util.h"

namespace llamaserve {
namespace {

using namespace gguf_test;

// Parses `image` and expects failure with `code` and every string of `fragments` in the
// message. Returns the message for further checks.
std::string expect_error(const std::vector<uint8_t>& image, StatusCode code,
                         std::initializer_list<std::string> fragments,
                         const GgufLimits& limits = {}) {
  auto file = parse_image(image, limits);
  EXPECT_FALSE(file.is_ok()) << "a corrupted image was accepted";
  if (file.is_ok()) return {};
  const Status& status = file.status();
  EXPECT_EQ(status.code(), code) << status.to_string();
  for (const std::string& fragment : fragments) {
    EXPECT_NE(status.message().find(fragment), std::string::npos)
        << "expected '" << fragment << "' in: " << status.message();
  }
  return status.message();
}

TEST(GgufValidation, SampleImageIsValid) {
  const std::vector<uint8_t> image = sample_image();
  auto file = parse_image(image);
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
}

TEST(GgufValidation, BadMagic) {
  std::vector<uint8_t> image = sample_image();
  image[0] = 'X';
  expect_error(image, StatusCode::kInvalidArgument,
               {"expected magic 'GGUF'", "offset 0", "58 47 55 46"});
}

TEST(GgufValidation, LegacyGgjtMagicIsNamed) {
  std::vector<uint8_t> image = sample_image();
  std::memcpy(image.data(), "tjgg", 4);
  expect_error(image, StatusCode::kInvalidArgument, {"legacy GGML/GGJT"});
}

TEST(GgufValidation, EmptyAndTinyFiles) {
  expect_error({}, StatusCode::kInvalidArgument, {"empty"});
  expect_error({'G', 'G'}, StatusCode::kInvalidArgument, {"truncated", "magic"});
}

TEST(GgufValidation, Version1IsUnsupported) {
  std::vector<uint8_t> image = sample_image();
  patch<uint32_t>(image, 4, 1);
  expect_error(image, StatusCode::kUnsupported, {"version 1", "expected version 2 or 3"});
}

TEST(GgufValidation, UnknownVersionIsUnsupported) {
  std::vector<uint8_t> image = sample_image();
  patch<uint32_t>(image, 4, 4);
  expect_error(image, StatusCode::kUnsupported, {"version 4", "offset 4"});
}

TEST(GgufValidation, BigEndianFileIsNamed) {
  std::vector<uint8_t> image = sample_image();
  patch<uint32_t>(image, 4, 0x03000000);
  expect_error(image, StatusCode::kUnsupported, {"big-endian"});
}

// Cutting the file anywhere before the end of the last tensor's bytes must fail cleanly:
// inside the header with "truncated file" and the offset, inside the data with the tensor
// that no longer fits.
TEST(GgufValidation, EveryTruncationFails) {
  const std::vector<uint8_t> image = sample_image();
  auto full = parse_image(image);
  ASSERT_TRUE(full.is_ok());
  uint64_t data_end = 0;
  for (const GgufTensorInfo& info : (*full)->tensors()) {
    data_end = std::max(data_end, (*full)->data_offset() + info.offset + info.n_bytes);
  }
  const uint64_t header_end = find_gguf_string(image, "cube") + 4 + 4 + 4 * 8 + 4 + 8;
  ASSERT_LE(header_end, (*full)->data_offset());
  for (size_t size = 0; size < data_end; ++size) {
    auto file = GgufFile::parse(image.data(), size);
    ASSERT_FALSE(file.is_ok()) << "prefix of " << size << " bytes was accepted";
    const std::string& message = file.status().message();
    if (size >= header_end) {
      EXPECT_NE(message.find("past the end of the file"), std::string::npos) << message;
    } else if (size >= 4) {
      EXPECT_NE(message.find("truncated file"), std::string::npos) << message;
      EXPECT_NE(message.find(fmt::format("the file ends at byte {}", size)), std::string::npos)
          << message;
    }
  }
  // The padding after the last tensor is not needed.
  EXPECT_TRUE(GgufFile::parse(image.data(), data_end).is_ok());
}

TEST(GgufValidation, TruncationInsideAStringArrayNamesTheKeyAndElement) {
  const std::vector<uint8_t> image = sample_image();
  const size_t value_at = key_type_offset(image, "test.arr_string") + 4;
  // type(4) count(8) "alpha"(8+5) ""(8) "ünï ✓"(8+9), then the fourth string's length and
  // 5 of its 10 bytes.
  const size_t fourth_bytes_at = value_at + 4 + 8 + 13 + 8 + 17 + 8;
  const size_t cut = fourth_bytes_at + 5;
  auto file = GgufFile::parse(image.data(), cut);
  ASSERT_FALSE(file.is_ok());
  const std::string& message = file.status().message();
  EXPECT_NE(message.find("metadata key 'test.arr_string'"), std::string::npos) << message;
  EXPECT_NE(message.find("element 3 of 4"), std::string::npos) << message;
  EXPECT_NE(message.find(fmt::format("needs 10 bytes at offset {}", fourth_bytes_at)),
            std::string::npos)
      << message;
}

TEST(GgufValidation, TensorDataPastEndOfFile) {
  std::vector<uint8_t> image = sample_image();
  patch<uint64_t>(image, tensor_info_offsets(image, "cube").data_offset, 1ull << 20);
  expect_error(
      image, StatusCode::kInvalidArgument,
      {"tensor 'cube'", "past the end of the file", fmt::format("{} bytes", image.size())});
}

TEST(GgufValidation, TensorOffsetOverflowIsPastTheEnd) {
  std::vector<uint8_t> image = sample_image();
  patch<uint64_t>(image, tensor_info_offsets(image, "cube").data_offset, ~uint64_t{31});
  expect_error(image, StatusCode::kInvalidArgument, {"tensor 'cube'", "past the end of the file"});
}

TEST(GgufValidation, OverlappingTensors) {
  std::vector<uint8_t> image = sample_image();
  const uint64_t first_offset =
      peek<uint64_t>(image, tensor_info_offsets(image, "norm.weight").data_offset);
  patch<uint64_t>(image, tensor_info_offsets(image, "ids").data_offset, first_offset);
  expect_error(image, StatusCode::kInvalidArgument, {"'norm.weight'", "'ids'", "overlap"});
}

TEST(GgufValidation, MisalignedTensorOffset) {
  std::vector<uint8_t> image = sample_image();
  const size_t at = tensor_info_offsets(image, "ids").data_offset;
  patch<uint64_t>(image, at, peek<uint64_t>(image, at) + 4);
  expect_error(image, StatusCode::kInvalidArgument,
               {"tensor 'ids'", "not a multiple of the alignment 32"});
}

TEST(GgufValidation, AbsurdMetadataCount) {
  std::vector<uint8_t> image = sample_image();
  patch<uint64_t>(image, 16, 1ull << 40);
  expect_error(image, StatusCode::kOutOfRange, {"1099511627776 metadata entries", "max_kv"});
  // Within the limit, but more entries than the file could hold.
  patch<uint64_t>(image, 16, 60000);
  expect_error(image, StatusCode::kInvalidArgument, {"truncated file", "60000 metadata entries"});
}

TEST(GgufValidation, AbsurdTensorCount) {
  std::vector<uint8_t> image = sample_image();
  patch<uint64_t>(image, 8, ~uint64_t{0});
  expect_error(image, StatusCode::kOutOfRange, {"tensors", "max_tensors"});
  patch<uint64_t>(image, 8, 1000000);
  expect_error(image, StatusCode::kInvalidArgument, {"truncated file", "1000000 tensors"});
}

TEST(GgufValidation, AbsurdStringLength) {
  std::vector<uint8_t> image = sample_image();
  const size_t length_at = find_gguf_string(image, "test.string") + 11 + 4;
  patch<uint64_t>(image, length_at, 1ull << 62);
  expect_error(
      image, StatusCode::kOutOfRange,
      {"metadata key 'test.string'", "max_string_bytes", fmt::format("offset {}", length_at)});
  patch<uint64_t>(image, length_at, 1000000);
  expect_error(image, StatusCode::kInvalidArgument,
               {"truncated file", "metadata key 'test.string'"});
}

TEST(GgufValidation, AbsurdKeyLength) {
  std::vector<uint8_t> image = sample_image();
  patch<uint64_t>(image, 24, ~uint64_t{0});  // length of the first key
  expect_error(image, StatusCode::kOutOfRange, {"metadata entry 0", "key length", "offset 24"});
}

TEST(GgufValidation, AbsurdArrayLength) {
  std::vector<uint8_t> image = sample_image();
  const size_t count_at = key_type_offset(image, "test.arr_string") + 4 + 4;
  patch<uint64_t>(image, count_at, 1ull << 60);
  expect_error(image, StatusCode::kOutOfRange, {"'test.arr_string'", "max_array_elems"});
  // Below the limit, but each string needs at least 8 bytes: rejected before allocating.
  patch<uint64_t>(image, count_at, 1ull << 22);
  expect_error(image, StatusCode::kInvalidArgument,
               {"'test.arr_string'", "needs at least 33554432 bytes"});
}

TEST(GgufValidation, LimitsAreConfigurable) {
  const std::vector<uint8_t> image = sample_image();
  GgufLimits strings;
  strings.max_string_bytes = 10;
  expect_error(image, StatusCode::kOutOfRange, {"max_string_bytes"}, strings);
  GgufLimits arrays;
  arrays.max_array_elems = 3;
  expect_error(image, StatusCode::kOutOfRange, {"'test.arr_string'", "max_array_elems"}, arrays);
  GgufLimits budget;
  budget.max_metadata_bytes = 200;
  expect_error(image, StatusCode::kOutOfRange, {"max_metadata_bytes"}, budget);
  GgufLimits kv;
  kv.max_kv = 5;
  expect_error(image, StatusCode::kOutOfRange, {"max_kv"}, kv);
  GgufLimits tensors;
  tensors.max_tensors = 2;
  expect_error(image, StatusCode::kOutOfRange, {"max_tensors"}, tensors);
  GgufLimits dims;
  dims.max_dims = 3;
  expect_error(image, StatusCode::kInvalidArgument, {"tensor 'cube'", "n_dims is 4"}, dims);
}

TEST(GgufValidation, UnknownValueType) {
  std::vector<uint8_t> image = sample_image();
  const size_t type_at = key_type_offset(image, "test.u16");
  patch<uint32_t>(image, type_at, 13);
  expect_error(image, StatusCode::kInvalidArgument,
               {"metadata key 'test.u16'", "is 13", fmt::format("offset {}", type_at)});
}

TEST(GgufValidation, UnknownTensorTypeIsNamed) {
  std::vector<uint8_t> image = sample_image();
  const size_t type_at = tensor_info_offsets(image, "ids").type;
  patch<uint32_t>(image, type_at, 99);
  expect_error(image, StatusCode::kUnsupported,
               {"tensor 'ids'", "unknown tensor type id 99", fmt::format("offset {}", type_at)});
  patch<uint32_t>(image, type_at, 4);  // a removed ggml type (Q4_2)
  expect_error(image, StatusCode::kUnsupported, {"unknown tensor type id 4"});
}

TEST(GgufValidation, BlockSizeMustDivideFirstDim) {
  std::vector<uint8_t> image = sample_image();
  patch<uint64_t>(image, tensor_info_offsets(image, "blk.0.q8.weight").dims, 48);
  expect_error(image, StatusCode::kInvalidArgument,
               {"tensor 'blk.0.q8.weight'", "Q8_0", "dims[0] = 48", "multiple of 32"});
}

TEST(GgufValidation, ZeroDims) {
  std::vector<uint8_t> image = sample_image();
  patch<uint32_t>(image, tensor_info_offsets(image, "ids").n_dims, 0);
  expect_error(image, StatusCode::kInvalidArgument,
               {"tensor 'ids'", "n_dims is 0", "expected 1..4"});
}

TEST(GgufValidation, MoreThanFourDims) {
  std::vector<uint8_t> image = sample_image();
  patch<uint32_t>(image, tensor_info_offsets(image, "ids").n_dims, 5);
  expect_error(image, StatusCode::kInvalidArgument, {"tensor 'ids'", "n_dims is 5"});
}

TEST(GgufValidation, ZeroDimension) {
  std::vector<uint8_t> image = sample_image();
  const size_t dims_at = tensor_info_offsets(image, "tok_embd.weight").dims;
  patch<uint64_t>(image, dims_at + 8, 0);
  expect_error(image, StatusCode::kInvalidArgument,
               {"tensor 'tok_embd.weight'", "dims[1] is 0", fmt::format("offset {}", dims_at + 8)});
}

TEST(GgufValidation, ElementCountOverflow) {
  std::vector<uint8_t> image = sample_image();
  const size_t dims_at = tensor_info_offsets(image, "tok_embd.weight").dims;
  patch<uint64_t>(image, dims_at, 1ull << 32);
  patch<uint64_t>(image, dims_at + 8, 1ull << 32);
  expect_error(image, StatusCode::kInvalidArgument, {"tensor 'tok_embd.weight'", "overflows"});
  // Fits 64 bits unsigned, but not the signed element count ggml uses.
  patch<uint64_t>(image, dims_at + 8, 1ull << 31);
  expect_error(image, StatusCode::kInvalidArgument, {"overflows a signed 64-bit integer"});
}

TEST(GgufValidation, DuplicateKey) {
  std::vector<uint8_t> image = sample_image();
  const size_t at = find_gguf_string(image, "test.i8");
  std::memcpy(image.data() + at, "test.u8", 7);
  expect_error(image, StatusCode::kInvalidArgument,
               {"duplicate metadata key 'test.u8'", fmt::format("offset {}", at - 8)});
}

TEST(GgufValidation, DuplicateTensorName) {
  std::vector<uint8_t> image = sample_image();
  const size_t at = find_gguf_string(image, "blk.0.q8.weight");
  std::memcpy(image.data() + at, "tok_embd.weight", 15);
  expect_error(image, StatusCode::kInvalidArgument,
               {"duplicate tensor name 'tok_embd.weight'", "tensor info 2 repeats tensor info 0"});
}

TEST(GgufValidation, NestedArray) {
  std::vector<uint8_t> image = sample_image();
  const size_t elem_type_at = key_type_offset(image, "test.arr_u8") + 4;
  patch<uint32_t>(image, elem_type_at, static_cast<uint32_t>(GgufValueType::ARRAY));
  expect_error(
      image, StatusCode::kUnsupported,
      {"metadata key 'test.arr_u8'", "nested array", fmt::format("offset {}", elem_type_at)});
}

TEST(GgufValidation, InvalidBoolByte) {
  std::vector<uint8_t> image = sample_image();
  const size_t value_at = key_type_offset(image, "test.bool_false") + 4;
  patch<uint8_t>(image, value_at, 2);
  expect_error(image, StatusCode::kInvalidArgument,
               {"metadata key 'test.bool_false'", "invalid BOOL byte 0x02",
                fmt::format("offset {}", value_at)});
}

TEST(GgufValidation, InvalidBoolByteInArray) {
  std::vector<uint8_t> image = sample_image();
  const size_t elems_at = key_type_offset(image, "test.arr_bool") + 4 + 4 + 8;
  patch<uint8_t>(image, elems_at + 1, 0xff);
  expect_error(image, StatusCode::kInvalidArgument,
               {"'test.arr_bool'", "element 1 of 3", "invalid BOOL byte 0xff"});
}

TEST(GgufValidation, AlignmentMustBeAPowerOfTwo) {
  std::vector<uint8_t> image = sample_image(64);
  const size_t value_at = key_type_offset(image, "general.alignment") + 4;
  ASSERT_EQ(peek<uint32_t>(image, value_at), 64u);
  patch<uint32_t>(image, value_at, 48);
  expect_error(image, StatusCode::kInvalidArgument,
               {"general.alignment", "power of two", "found 48"});
  patch<uint32_t>(image, value_at, 0);
  expect_error(image, StatusCode::kInvalidArgument, {"general.alignment", "found 0"});
}

TEST(GgufValidation, AlignmentMustBeAnInteger) {
  std::vector<uint8_t> image = sample_image(64);
  const size_t type_at = key_type_offset(image, "general.alignment");
  patch<uint32_t>(image, type_at, static_cast<uint32_t>(GgufValueType::FLOAT32));
  expect_error(image, StatusCode::kInvalidArgument, {"general.alignment", "FLOAT32"});
}

TEST(GgufValidation, OpenNamesTheFile) {
  auto missing = GgufFile::open("/nonexistent/model.gguf");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);

  std::vector<uint8_t> image = sample_image();
  patch<uint32_t>(image, 4, 1);
  const std::string path = ::testing::TempDir() + "/gguf_v1.gguf";
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(std::fwrite(image.data(), 1, image.size(), f), image.size());
  std::fclose(f);
  auto file = GgufFile::open(path);
  ASSERT_FALSE(file.is_ok());
  EXPECT_NE(file.status().message().find(path), std::string::npos) << file.status().message();
  std::remove(path.c_str());
}

}  // namespace
}  // namespace llamaserve
