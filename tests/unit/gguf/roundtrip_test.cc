// Writer → reader round trips: every value type, tensors, alignment, streamed writes, and the
// writer's own input checks.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "gguf/gguf.h"
#include "gguf_test_util.h"

namespace llamaserve {
namespace {

using namespace gguf_test;
using T = GgufValueType;
namespace fs = std::filesystem;

std::unique_ptr<GgufFile> parse_ok(const std::vector<uint8_t>& image) {
  auto file = parse_image(image);
  EXPECT_TRUE(file.is_ok()) << file.status().to_string();
  return file.is_ok() ? std::move(file).value() : nullptr;
}

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A fresh empty directory per test, so leftover temporary files can be counted.
std::string fresh_dir(const std::string& name) {
  fs::path dir = fs::path(::testing::TempDir()) / ("gguf_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

size_t count_entries(const std::string& dir) {
  return static_cast<size_t>(std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}

TEST(GgufRoundTrip, ScalarValuesKeepTypeAndValue) {
  const std::vector<uint8_t> image = sample_image();
  auto file = parse_ok(image);
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(file->version(), 3u);
  struct Expected {
    const char* key;
    GgufValueType type;
  };
  for (const Expected& e : std::initializer_list<Expected>{{"test.u8", T::UINT8},
                                                           {"test.i8", T::INT8},
                                                           {"test.u16", T::UINT16},
                                                           {"test.i16", T::INT16},
                                                           {"test.u32", T::UINT32},
                                                           {"test.i32", T::INT32},
                                                           {"test.u64", T::UINT64},
                                                           {"test.i64", T::INT64},
                                                           {"test.f32", T::FLOAT32},
                                                           {"test.f64", T::FLOAT64},
                                                           {"test.bool_true", T::BOOL},
                                                           {"test.string", T::STRING}}) {
    const GgufValue* value = file->find(e.key);
    ASSERT_NE(value, nullptr) << e.key;
    EXPECT_EQ(value->type, e.type) << e.key;
  }
  EXPECT_EQ(file->get_int("test.u8"), 200);
  EXPECT_EQ(file->get_int("test.i8"), -100);
  EXPECT_EQ(file->get_int("test.u16"), 60000);
  EXPECT_EQ(file->get_int("test.i16"), -30000);
  EXPECT_EQ(file->get_int("test.u32"), 4000000000);
  EXPECT_EQ(file->get_int("test.i32"), -2000000000);
  EXPECT_EQ(std::get<uint64_t>(file->find("test.u64")->data), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(file->get_int("test.u64"), std::nullopt) << "does not fit int64";
  EXPECT_EQ(file->get_int("test.i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(file->get_float("test.f32"), 3.25);
  EXPECT_EQ(file->get_float("test.f64"), -1.5e300);
  EXPECT_EQ(file->get_float("test.u16"), 60000.0) << "integers convert to float";
  EXPECT_EQ(file->get_bool("test.bool_true"), true);
  EXPECT_EQ(file->get_bool("test.bool_false"), false);
  EXPECT_EQ(file->get_bool("test.u8"), std::nullopt);
  EXPECT_EQ(file->get_string("test.string"), "h\xC3\xA9llo w\xC3\xB6rld \xE2\x9C\x93");
  EXPECT_EQ(file->get_string("test.empty_string"), "");
  EXPECT_EQ(file->get_string("test.u8"), std::nullopt);
  EXPECT_EQ(file->get_int("no.such.key"), std::nullopt);
  EXPECT_EQ(file->find("no.such.key"), nullptr);
}

TEST(GgufRoundTrip, ArrayValuesKeepElementTypeAndElements) {
  const std::vector<uint8_t> image = sample_image();
  auto file = parse_ok(image);
  ASSERT_NE(file, nullptr);
  auto ints = [&](const char* key, GgufValueType elem) {
    const GgufArray* array = file->get_array(key);
    EXPECT_NE(array, nullptr) << key;
    if (array == nullptr) return std::vector<int64_t>{};
    EXPECT_EQ(array->elem_type, elem) << key;
    EXPECT_TRUE(array->floats.empty() && array->strings.empty()) << key;
    EXPECT_EQ(array->size(), array->ints.size());
    return array->ints;
  };
  EXPECT_EQ(ints("test.arr_u8", T::UINT8), (std::vector<int64_t>{0, 1, 255}));
  EXPECT_EQ(ints("test.arr_i8", T::INT8), (std::vector<int64_t>{-128, 0, 127}));
  EXPECT_EQ(ints("test.arr_u16", T::UINT16), (std::vector<int64_t>{0, 65535}));
  EXPECT_EQ(ints("test.arr_i16", T::INT16), (std::vector<int64_t>{-32768, 32767}));
  EXPECT_EQ(ints("test.arr_u32", T::UINT32), (std::vector<int64_t>{0, 4294967295}));
  EXPECT_EQ(ints("test.arr_i32", T::INT32),
            (std::vector<int64_t>{std::numeric_limits<int32_t>::min(), 7,
                                  std::numeric_limits<int32_t>::max()}));
  EXPECT_EQ(ints("test.arr_u64", T::UINT64), (std::vector<int64_t>{0, -1}));
  EXPECT_EQ(ints("test.arr_i64", T::INT64),
            (std::vector<int64_t>{std::numeric_limits<int64_t>::min(),
                                  std::numeric_limits<int64_t>::max()}));
  EXPECT_EQ(ints("test.arr_bool", T::BOOL), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(ints("test.arr_empty", T::INT32), std::vector<int64_t>{});

  const GgufArray* f32 = file->get_array("test.arr_f32");
  ASSERT_NE(f32, nullptr);
  EXPECT_EQ(f32->elem_type, T::FLOAT32);
  EXPECT_EQ(f32->floats, (std::vector<double>{0.5, -2.0, 1024.125}));
  const GgufArray* f64 = file->get_array("test.arr_f64");
  ASSERT_NE(f64, nullptr);
  EXPECT_EQ(f64->elem_type, T::FLOAT64);
  EXPECT_EQ(f64->floats, (std::vector<double>{0.1, -1e-300}));
  const GgufArray* strings = file->get_array("test.arr_string");
  ASSERT_NE(strings, nullptr);
  EXPECT_EQ(strings->elem_type, T::STRING);
  EXPECT_EQ(strings->strings, (std::vector<std::string>{
                                  "alpha", "", "\xC3\xBCn\xC3\xAF \xE2\x9C\x93", "with space"}));
  EXPECT_EQ(file->get_array("test.u8"), nullptr);
}

TEST(GgufRoundTrip, MetadataKeepsInsertionOrderAndSetReplacesInPlace) {
  GgufWriter writer;
  writer.set_u32("z.first", 1);
  writer.set_u32("a.second", 2);
  writer.set_string("m.third", "x");
  writer.set_string("z.first", "replaced");
  auto bytes = writer.to_bytes();
  ASSERT_TRUE(bytes.is_ok()) << bytes.status().to_string();
  auto file = parse_ok(*bytes);
  ASSERT_NE(file, nullptr);
  ASSERT_EQ(file->metadata().size(), 3u);
  EXPECT_EQ(file->metadata()[0].first, "z.first");
  EXPECT_EQ(file->metadata()[1].first, "a.second");
  EXPECT_EQ(file->metadata()[2].first, "m.third");
  EXPECT_EQ(file->get_string("z.first"), "replaced");
  EXPECT_TRUE(file->tensors().empty());
}

TEST(GgufRoundTrip, TensorsKeepShapeTypeAndBytesWithoutCopying) {
  const std::vector<uint8_t> image = sample_image();
  auto file = parse_ok(image);
  ASSERT_NE(file, nullptr);
  const auto& expected = sample_tensors();
  ASSERT_EQ(file->tensors().size(), expected.size());
  EXPECT_EQ(file->data_offset() % 32, 0u);
  for (size_t i = 0; i < expected.size(); ++i) {
    const GgufTensorInfo& info = file->tensors()[i];
    EXPECT_EQ(info.name, expected[i].name);
    EXPECT_EQ(info.type, expected[i].type) << info.name;
    EXPECT_EQ(info.dims, expected[i].dims) << info.name;
    EXPECT_EQ(info.n_bytes, expected[i].n_bytes) << info.name;
    EXPECT_EQ(info.offset % 32, 0u) << info.name;
    EXPECT_EQ(file->find_tensor(expected[i].name), &info);
    const uint8_t* data = file->tensor_data(info);
    EXPECT_EQ(data, image.data() + file->data_offset() + info.offset)
        << "must point into the image";
    EXPECT_EQ(std::vector<uint8_t>(data, data + info.n_bytes),
              pattern_bytes(expected[i].n_bytes, sample_seed(i)))
        << info.name;
  }
  const GgufTensorInfo* q8 = file->find_tensor("blk.0.q8.weight");
  ASSERT_NE(q8, nullptr);
  EXPECT_EQ(q8->n_elements, 128u);
  EXPECT_EQ(q8->n_rows(), 2u);
  EXPECT_EQ(file->find_tensor("missing"), nullptr);
}

TEST(GgufRoundTrip, AlignmentOtherThan32IsWrittenAndHonoured) {
  for (uint64_t alignment : {1u, 8u, 64u, 4096u}) {
    SCOPED_TRACE(alignment);
    const std::vector<uint8_t> image = sample_image(alignment);
    auto file = parse_ok(image);
    ASSERT_NE(file, nullptr);
    EXPECT_EQ(file->alignment(), alignment);
    EXPECT_EQ(file->get_int("general.alignment"), static_cast<int64_t>(alignment));
    EXPECT_EQ(file->data_offset() % alignment, 0u);
    for (size_t i = 0; i < file->tensors().size(); ++i) {
      const GgufTensorInfo& info = file->tensors()[i];
      EXPECT_EQ(info.offset % alignment, 0u);
      const uint8_t* data = file->tensor_data(info);
      EXPECT_EQ(std::vector<uint8_t>(data, data + info.n_bytes),
                pattern_bytes(info.n_bytes, sample_seed(i)));
    }
  }
  // The default alignment needs no key.
  const std::vector<uint8_t> image = sample_image(32);
  auto file = parse_ok(image);
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(file->find("general.alignment"), nullptr);
  EXPECT_EQ(file->alignment(), 32u);
}

TEST(GgufRoundTrip, Version2IsRead) {
  std::vector<uint8_t> image = sample_image();
  patch<uint32_t>(image, 4, 2);
  auto file = parse_ok(image);
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(file->version(), 2u);
  EXPECT_EQ(file->tensors().size(), sample_tensors().size());
}

TEST(GgufWriterTest, WriteProducesTheSameBytesAsToBytes) {
  const std::string dir = fresh_dir("write_same");
  const std::string path = dir + "/sample.gguf";
  GgufWriter writer(64);
  add_sample_metadata(writer);
  add_sample_tensors(writer);
  ASSERT_TRUE(writer.write(path).is_ok());
  auto expected = writer.to_bytes();
  ASSERT_TRUE(expected.is_ok());
  EXPECT_EQ(read_file_bytes(path), *expected);
  EXPECT_EQ(count_entries(dir), 1u) << "no temporary file may remain";

  auto file = GgufFile::open(path);
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  EXPECT_EQ((*file)->path(), path);
  EXPECT_EQ((*file)->file_size(), expected->size());
  EXPECT_EQ((*file)->alignment(), 64u);
}

TEST(GgufWriterTest, StreamsTensorsWithoutBytesThroughTheFillCallback) {
  const std::string dir = fresh_dir("stream");
  const std::string path = dir + "/streamed.gguf";
  GgufWriter writer;
  writer.set_string("general.architecture", "llama");
  ASSERT_TRUE(writer.add_tensor("given", TensorType::F32, {3}, pattern_bytes(12, 9)).is_ok());
  ASSERT_TRUE(writer.add_tensor("streamed.a", TensorType::Q8_0, {32, 3}).is_ok());
  ASSERT_TRUE(writer.add_tensor("streamed.b", TensorType::F16, {5}).is_ok());
  std::vector<std::pair<size_t, size_t>> calls;
  Status status = writer.write(path, [&](size_t index, uint8_t* out, size_t n_bytes) {
    calls.emplace_back(index, n_bytes);
    const std::vector<uint8_t> bytes = pattern_bytes(n_bytes, static_cast<uint8_t>(100 + index));
    std::memcpy(out, bytes.data(), n_bytes);
    return Status::ok();
  });
  ASSERT_TRUE(status.is_ok()) << status.to_string();
  EXPECT_EQ(calls, (std::vector<std::pair<size_t, size_t>>{{1, 3 * 34}, {2, 10}}));

  auto file = GgufFile::open(path);
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  const auto& tensors = (*file)->tensors();
  ASSERT_EQ(tensors.size(), 3u);
  auto bytes_of = [&](const GgufTensorInfo& info) {
    const uint8_t* data = (*file)->tensor_data(info);
    return std::vector<uint8_t>(data, data + info.n_bytes);
  };
  EXPECT_EQ(bytes_of(tensors[0]), pattern_bytes(12, 9));
  EXPECT_EQ(bytes_of(tensors[1]), pattern_bytes(102, 101));
  EXPECT_EQ(bytes_of(tensors[2]), pattern_bytes(10, 102));
}

TEST(GgufWriterTest, FailedFillLeavesNoFileBehind) {
  const std::string dir = fresh_dir("fill_fails");
  const std::string path = dir + "/model.gguf";
  GgufWriter writer;
  ASSERT_TRUE(writer.add_tensor("a", TensorType::F32, {4}).is_ok());
  ASSERT_TRUE(writer.add_tensor("b", TensorType::F32, {4}).is_ok());
  Status status = writer.write(path, [](size_t index, uint8_t* out, size_t n_bytes) {
    if (index == 1) return make_error(StatusCode::kIo, "source tensor unreadable");
    std::memset(out, 0, n_bytes);
    return Status::ok();
  });
  ASSERT_FALSE(status.is_ok());
  EXPECT_EQ(status.code(), StatusCode::kIo);
  EXPECT_NE(status.message().find("source tensor unreadable"), std::string::npos);
  EXPECT_NE(status.message().find("'b'"), std::string::npos) << status.message();
  EXPECT_EQ(count_entries(dir), 0u);
}

TEST(GgufWriterTest, FailedWriteKeepsThePreviousFile) {
  const std::string dir = fresh_dir("keep_previous");
  const std::string path = dir + "/model.gguf";
  { std::ofstream(path) << "previous contents"; }
  GgufWriter writer;
  ASSERT_TRUE(writer.add_tensor("a", TensorType::F32, {4}).is_ok());
  Status status = writer.write(
      path, [](size_t, uint8_t*, size_t) { return make_error(StatusCode::kInternal, "boom"); });
  ASSERT_FALSE(status.is_ok());
  EXPECT_EQ(count_entries(dir), 1u);
  auto bytes = read_file_bytes(path);
  EXPECT_EQ(std::string(bytes.begin(), bytes.end()), "previous contents");
}

// The bytes of descriptor `fd` from offset 0.
std::vector<uint8_t> read_fd_bytes(int fd) {
  std::vector<uint8_t> bytes;
  uint8_t buffer[4096];
  for (off_t offset = 0;;) {
    const ssize_t n = pread(fd, buffer, sizeof buffer, offset);
    if (n <= 0) break;
    bytes.insert(bytes.end(), buffer, buffer + n);
    offset += n;
  }
  return bytes;
}

TEST(GgufWriterTest, WriteMappedFillsAMemoryFileWithTheSameBytes) {
  GgufWriter writer(64);
  add_sample_metadata(writer);
  add_sample_tensors(writer);
  ASSERT_TRUE(writer.add_tensor("streamed", TensorType::Q8_0, {32, 3}).is_ok());
  const int fd = memfd_create("gguf-write-mapped", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  std::vector<size_t> filled;
  Status status = writer.write_mapped(fd, [&](size_t index, uint8_t* out, size_t n_bytes) {
    filled.push_back(index);
    const std::vector<uint8_t> bytes = pattern_bytes(n_bytes, 7);
    std::memcpy(out, bytes.data(), n_bytes);
    return Status::ok();
  });
  ASSERT_TRUE(status.is_ok()) << status.to_string();
  EXPECT_EQ(filled.size(), 1u);
  const std::vector<uint8_t> image = read_fd_bytes(fd);

  // The same file as write() of the same tensors with those bytes given up front.
  GgufWriter given(64);
  add_sample_metadata(given);
  add_sample_tensors(given);
  ASSERT_TRUE(
      given.add_tensor("streamed", TensorType::Q8_0, {32, 3}, pattern_bytes(102, 7)).is_ok());
  auto expected = given.to_bytes();
  ASSERT_TRUE(expected.is_ok());
  EXPECT_EQ(image, *expected);
  auto file = GgufFile::open("/proc/self/fd/" + std::to_string(fd));
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  EXPECT_EQ((*file)->tensors().size(), sample_tensors().size() + 1);
  EXPECT_EQ((*file)->alignment(), 64u);

  // Only an empty file is written into; a failed fill names its tensor.
  EXPECT_FALSE(
      writer.write_mapped(fd, [](size_t, uint8_t*, size_t) { return Status::ok(); }).is_ok());
  ::close(fd);
  const int fresh = memfd_create("gguf-write-mapped-fails", MFD_CLOEXEC);
  ASSERT_GE(fresh, 0);
  status = writer.write_mapped(
      fresh, [](size_t, uint8_t*, size_t) { return make_error(StatusCode::kIo, "no source"); });
  ASSERT_FALSE(status.is_ok());
  EXPECT_NE(status.message().find("'streamed'"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("no source"), std::string::npos);
  ::close(fresh);
}

TEST(GgufWriterTest, MissingBytesWithoutFillIsAnErrorBeforeAnyFileExists) {
  const std::string dir = fresh_dir("no_fill");
  GgufWriter writer;
  ASSERT_TRUE(writer.add_tensor("lazy", TensorType::F32, {4}).is_ok());
  Status status = writer.write(dir + "/model.gguf");
  ASSERT_FALSE(status.is_ok());
  EXPECT_NE(status.message().find("'lazy'"), std::string::npos);
  EXPECT_EQ(count_entries(dir), 0u);
  auto bytes = writer.to_bytes();
  ASSERT_FALSE(bytes.is_ok());
  EXPECT_NE(bytes.status().message().find("'lazy'"), std::string::npos);
}

TEST(GgufWriterTest, UnwritableDirectoryIsAnIoError) {
  GgufWriter writer;
  writer.set_u32("a", 1);
  Status status = writer.write("/nonexistent-dir/model.gguf");
  ASSERT_FALSE(status.is_ok());
  EXPECT_EQ(status.code(), StatusCode::kIo);
  EXPECT_NE(status.message().find("/nonexistent-dir/model.gguf"), std::string::npos);
}

TEST(GgufWriterTest, RejectsInvalidTensors) {
  GgufWriter writer;
  ASSERT_TRUE(writer.add_tensor("ok", TensorType::F32, {2}).is_ok());
  EXPECT_FALSE(writer.add_tensor("ok", TensorType::F32, {2}).is_ok()) << "duplicate name";
  EXPECT_FALSE(writer.add_tensor("", TensorType::F32, {2}).is_ok()) << "empty name";
  EXPECT_FALSE(writer.add_tensor(std::string(64, 'x'), TensorType::F32, {2}).is_ok());
  EXPECT_TRUE(writer.add_tensor(std::string(63, 'x'), TensorType::F32, {2}).is_ok());
  EXPECT_FALSE(writer.add_tensor("no_dims", TensorType::F32, {}).is_ok());
  EXPECT_FALSE(writer.add_tensor("five_dims", TensorType::F32, {1, 1, 1, 1, 1}).is_ok());
  EXPECT_FALSE(writer.add_tensor("zero_dim", TensorType::F32, {4, 0}).is_ok());
  EXPECT_FALSE(writer.add_tensor("overflow", TensorType::F32, {1ull << 32, 1ull << 32}).is_ok());
  EXPECT_FALSE(writer.add_tensor("partial_block", TensorType::Q4_0, {48}).is_ok());
  EXPECT_FALSE(writer.add_tensor("unknown_type", static_cast<TensorType>(4), {2}).is_ok());
  Status wrong_size =
      writer.add_tensor("wrong_size", TensorType::F16, {4}, std::vector<uint8_t>(7));
  ASSERT_FALSE(wrong_size.is_ok());
  EXPECT_NE(wrong_size.message().find("needs 8 bytes, got 7"), std::string::npos)
      << wrong_size.message();
}

TEST(GgufWriterTest, RejectsValuesThatDoNotMatchTheirType) {
  auto fails = [](GgufValue value) {
    GgufWriter writer;
    writer.set("bad.key", std::move(value));
    auto bytes = writer.to_bytes();
    if (bytes.is_ok()) return false;
    EXPECT_NE(bytes.status().message().find("'bad.key'"), std::string::npos);
    return true;
  };
  EXPECT_TRUE(fails(GgufValue{T::UINT8, uint64_t{300}}));
  EXPECT_TRUE(fails(GgufValue{T::INT8, int64_t{-129}}));
  EXPECT_TRUE(fails(GgufValue{T::UINT32, int64_t{-1}}));
  EXPECT_TRUE(fails(GgufValue{T::UINT8, std::string("text")}));
  EXPECT_TRUE(fails(GgufValue{T::STRING, uint64_t{1}}));
  EXPECT_TRUE(fails(GgufValue{T::FLOAT32, bool{true}}));
  EXPECT_TRUE(fails(GgufValue{static_cast<GgufValueType>(13), uint64_t{1}}));
  EXPECT_TRUE(fails(array_value(T::ARRAY, {})));
  EXPECT_TRUE(fails(array_value(T::UINT8, {256})));
  EXPECT_TRUE(fails(array_value(T::BOOL, {2})));
  EXPECT_TRUE(fails(array_value(T::STRING, {1})));
  EXPECT_FALSE(fails(GgufValue{T::UINT8, int64_t{255}})) << "a fitting signed holder is fine";
}

TEST(GgufWriterTest, RejectsBadOrConflictingAlignment) {
  EXPECT_FALSE(GgufWriter(48).to_bytes().is_ok());
  EXPECT_FALSE(GgufWriter(0).to_bytes().is_ok());
  GgufWriter writer(64);
  writer.set_u32("general.alignment", 128);
  auto bytes = writer.to_bytes();
  ASSERT_FALSE(bytes.is_ok());
  EXPECT_NE(bytes.status().message().find("general.alignment"), std::string::npos);
}

TEST(GgufRequire, ReportsEveryMissingKeyAndTensor) {
  const std::vector<uint8_t> image = sample_image();
  auto file = parse_ok(image);
  ASSERT_NE(file, nullptr);
  EXPECT_TRUE(require_keys(*file, {"general.architecture", "test.u8"}).is_ok());
  EXPECT_TRUE(require_tensors(*file, {"tok_embd.weight", "cube"}).is_ok());

  Status keys = require_keys(*file, {"general.architecture", "llama.block_count", "llama.x"});
  ASSERT_FALSE(keys.is_ok());
  EXPECT_EQ(keys.code(), StatusCode::kNotFound);
  EXPECT_NE(keys.message().find("'llama.block_count', 'llama.x'"), std::string::npos)
      << keys.message();
  EXPECT_EQ(keys.message().find("general.architecture"), std::string::npos);

  Status tensors = require_tensors(*file, {"output.weight", "cube"});
  ASSERT_FALSE(tensors.is_ok());
  EXPECT_EQ(tensors.code(), StatusCode::kNotFound);
  EXPECT_NE(tensors.message().find("tensor 'output.weight'"), std::string::npos)
      << tensors.message();
}

}  // namespace
}  // namespace llamaserve
