#include "server/embedding_request.h"

#include <bit>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "server/json_fields.h"

namespace llamaserve::server {
namespace {

using nlohmann::json;

static_assert(std::endian::native == std::endian::little,
              "base64 embeddings are little-endian float32 bytes");

Status read_ids(const json& array, const std::string& name, std::vector<int32_t>& out) {
  if (array.empty()) return invalid(fmt::format("'{}' must not be an empty array", name));
  return read_token_array(array, name, out);
}

Status check_count(const json& input) {
  if (input.size() > kMaxEmbeddingInputs) {
    return invalid(fmt::format("'input' holds {} inputs; at most {} per request", input.size(),
                               kMaxEmbeddingInputs));
  }
  return Status::ok();
}

// "input": a string, a list of strings, a list of ids (one input), or a list of id lists.
Status read_input(const json& body, ParsedEmbeddings& out) {
  const json* input = find_field(body, "input");
  if (input == nullptr) return invalid("'input' is required");
  if (input->is_string()) {
    if (input->get_ref<const std::string&>().empty()) {
      return invalid("'input' must not be an empty string");
    }
    out.texts.push_back(input->get<std::string>());
    return Status::ok();
  }
  if (!input->is_array()) {
    return wrong_type("input", "a string, an array of strings or an array of token ids", *input);
  }
  if (input->empty()) return invalid("'input' must not be an empty array");
  const json& first = input->front();
  if (first.is_number()) {
    out.token_inputs.emplace_back();
    return read_ids(*input, "input", out.token_inputs.back());
  }
  LS_RETURN_IF_ERROR(check_count(*input));
  if (first.is_string()) {
    out.texts.reserve(input->size());
    for (size_t i = 0; i < input->size(); ++i) {
      const json& item = (*input)[i];
      const std::string name = fmt::format("input[{}]", i);
      if (!item.is_string()) return wrong_type(name, "a string (as input[0] is)", item);
      if (item.get_ref<const std::string&>().empty()) {
        return invalid(fmt::format("'{}' must not be an empty string", name));
      }
      out.texts.push_back(item.get<std::string>());
    }
    return Status::ok();
  }
  if (first.is_array()) {
    out.token_inputs.resize(input->size());
    for (size_t i = 0; i < input->size(); ++i) {
      const json& item = (*input)[i];
      const std::string name = fmt::format("input[{}]", i);
      if (!item.is_array()) return wrong_type(name, "an array of token ids (as input[0] is)", item);
      LS_RETURN_IF_ERROR(read_ids(item, name, out.token_inputs[i]));
    }
    return Status::ok();
  }
  return wrong_type("input[0]", "a string, a token id or an array of token ids", first);
}

}  // namespace

Result<ParsedEmbeddings> parse_embeddings(const nlohmann::json& body) {
  ParsedEmbeddings out;
  LS_RETURN_IF_ERROR(read_string(body, "model", out.model));
  LS_RETURN_IF_ERROR(read_input(body, out));
  std::string encoding = "float";
  LS_RETURN_IF_ERROR(read_string(body, "encoding_format", encoding));
  if (encoding == "base64") {
    out.encoding = EmbeddingEncoding::kBase64;
  } else if (encoding != "float") {
    return invalid(fmt::format("'encoding_format' must be \"float\" or \"base64\", got {}",
                               json(encoding).dump()));
  }
  LS_RETURN_IF_ERROR(
      read_int(body, "dimensions", 1, std::numeric_limits<int32_t>::max(), out.dimensions));
  LS_RETURN_IF_ERROR(read_string(body, "user", out.user));
  return out;
}

std::string base64_floats(std::span<const float> values) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* bytes = reinterpret_cast<const unsigned char*>(values.data());
  const size_t n = values.size_bytes();
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= n; i += 3) {
    const uint32_t v = (uint32_t{bytes[i]} << 16) | (uint32_t{bytes[i + 1]} << 8) | bytes[i + 2];
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (i < n) {
    const bool two = i + 1 < n;
    const uint32_t v = (uint32_t{bytes[i]} << 16) | (two ? uint32_t{bytes[i + 1]} << 8 : 0u);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += two ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

nlohmann::json embeddings_response(std::span<const float> embeddings, size_t n_embd,
                                   EmbeddingEncoding encoding, const std::string& model,
                                   int32_t prompt_tokens) {
  json data = json::array();
  const size_t n_inputs = embeddings.size() / n_embd;
  for (size_t i = 0; i < n_inputs; ++i) {
    const std::span<const float> row = embeddings.subspan(i * n_embd, n_embd);
    json entry = {{"object", "embedding"}, {"index", i}};
    if (encoding == EmbeddingEncoding::kBase64) {
      entry["embedding"] = base64_floats(row);
    } else {
      // Each float widened to a double exactly: read back as float32, the same value.
      json values = json::array();
      for (float v : row) values.push_back(v);
      entry["embedding"] = std::move(values);
    }
    data.push_back(std::move(entry));
  }
  return {{"object", "list"},
          {"data", std::move(data)},
          {"model", model},
          {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}};
}

}  // namespace llamaserve::server
