// Test helper: runs the reference codecs on raw files.
//   quant_tool quantize   TYPE in.f32 out.bin   (little-endian float32 in, TYPE blocks out)
//   quant_tool dequantize TYPE in.bin out.f32
// Exits non-zero with a message when the type or the input size is not acceptable.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "quant/quant.h"

namespace {

bool read_file(const char* path, std::vector<char>* data) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  data->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return true;
}

bool write_file(const char* path, const void* data, size_t size) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  return static_cast<bool>(out);
}

int fail(const std::string& message) {
  std::fprintf(stderr, "quant_tool: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace llamaserve;
  if (argc != 5) return fail("usage: quant_tool quantize|dequantize TYPE IN OUT");
  const std::string mode = argv[1];
  const Result<TensorType> type = parse_tensor_type(argv[2]);
  if (!type) return fail(type.status().to_string());
  const TypeTraits& geometry = traits(*type);
  std::vector<char> input;
  if (!read_file(argv[3], &input)) return fail(std::string("cannot read ") + argv[3]);

  if (mode == "quantize") {
    if (input.size() % sizeof(float) != 0) return fail("input is not a whole number of floats");
    const int64_t n = static_cast<int64_t>(input.size() / sizeof(float));
    std::vector<float> values(static_cast<size_t>(n));
    std::copy(input.begin(), input.end(), reinterpret_cast<char*>(values.data()));
    const Status ok = check_row(*type, n);
    if (!ok) return fail(ok.to_string());
    std::vector<uint8_t> output(row_bytes(*type, static_cast<size_t>(n)));
    const Status status = quantize_row(*type, values.data(), output.data(), n);
    if (!status) return fail(status.to_string());
    return write_file(argv[4], output.data(), output.size()) ? 0 : fail("cannot write output");
  }
  if (mode == "dequantize") {
    if (input.size() % geometry.block_bytes != 0)
      return fail("input is not a whole number of blocks");
    const int64_t n =
        static_cast<int64_t>(input.size() / geometry.block_bytes * geometry.block_elems);
    std::vector<float> output(static_cast<size_t>(n));
    const Status status = dequantize_row(*type, input.data(), output.data(), n);
    if (!status) return fail(status.to_string());
    return write_file(argv[4], output.data(), output.size() * sizeof(float))
               ? 0
               : fail("cannot write output");
  }
  return fail("unknown mode '" + mode + "'");
}
