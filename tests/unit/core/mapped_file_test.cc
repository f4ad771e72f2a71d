#include "core/mapped_file.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

namespace llamaserve {
namespace {

TEST(MappedFileTest, MapsContents) {
  std::string path = ::testing::TempDir() + "/mapped_file_test.bin";
  {
    std::ofstream out(path, std::ios::binary);
    out << "hello";
  }
  auto file = MappedFile::open(path);
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  ASSERT_EQ((*file)->size(), 5u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>((*file)->data()), 5), "hello");
  std::remove(path.c_str());
}

TEST(MappedFileTest, MissingFileIsNotFound) {
  auto file = MappedFile::open("/nonexistent/dir/model.gguf");
  ASSERT_FALSE(file.is_ok());
  EXPECT_EQ(file.status().code(), StatusCode::kNotFound);
  EXPECT_NE(file.status().message().find("/nonexistent/dir/model.gguf"), std::string::npos);
}

TEST(MappedFileTest, DirectoryIsRejected) {
  auto file = MappedFile::open("/tmp");
  ASSERT_FALSE(file.is_ok());
  EXPECT_EQ(file.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace llamaserve
