// tokenizer_data_from_gguf and Tokenizer::from_gguf live apart from the rest of the tokenizer so
// that code which builds TokenizerData by hand does not pull in the GGUF reader.
#include <limits>

#include "gguf/gguf.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_data.h"

namespace llamaserve {
namespace {

Result<const GgufArray*> get_typed_array(const GgufFile& file, std::string_view key,
                                         bool want_strings, bool want_floats) {
  const GgufValue* value = file.find(key);
  if (value == nullptr) return static_cast<const GgufArray*>(nullptr);
  const GgufArray* array = value->as_array();
  const bool ok =
      array != nullptr && (want_strings  ? array->elem_type == GgufValueType::STRING
                           : want_floats ? (array->elem_type == GgufValueType::FLOAT32 ||
                                            array->elem_type == GgufValueType::FLOAT64)
                                         : (array->elem_type != GgufValueType::STRING &&
                                            array->elem_type != GgufValueType::FLOAT32 &&
                                            array->elem_type != GgufValueType::FLOAT64));
  if (!ok) {
    return make_error(StatusCode::kInvalidArgument, "{}: expected an array of {}, found {}", key,
                      want_strings  ? "strings"
                      : want_floats ? "floats"
                                    : "integers",
                      array ? std::string("an array of ") + gguf_value_type_name(array->elem_type)
                            : std::string(gguf_value_type_name(value->type)));
  }
  return array;
}

// A missing id is fine; an id that is present but not an integer is an error.
Result<std::optional<int32_t>> get_id(const GgufFile& file, std::string_view key) {
  const GgufValue* value = file.find(key);
  if (value == nullptr) return std::optional<int32_t>();
  const std::optional<int64_t> id = value->as_int();
  if (!id) {
    return make_error(StatusCode::kInvalidArgument, "{}: expected an integer token id, found {}",
                      key, gguf_value_type_name(value->type));
  }
  if (*id < 0 || *id > std::numeric_limits<int32_t>::max()) {
    return make_error(StatusCode::kInvalidArgument, "{}: token id {} is out of range", key, *id);
  }
  return std::optional<int32_t>(static_cast<int32_t>(*id));
}

Result<bool> get_flag(const GgufFile& file, std::string_view key, bool default_value) {
  const GgufValue* value = file.find(key);
  if (value == nullptr) return default_value;
  const std::optional<bool> flag = value->as_bool();
  if (!flag) {
    return make_error(StatusCode::kInvalidArgument, "{}: expected a bool, found {}", key,
                      gguf_value_type_name(value->type));
  }
  return *flag;
}

Result<TokenizerData> read_tokenizer_data(const GgufFile& file) {
  TokenizerData data;
  const std::optional<std::string> model = file.get_string("tokenizer.ggml.model");
  if (!model) {
    return make_error(StatusCode::kNotFound, "tokenizer.ggml.model is missing (or not a string)");
  }
  data.model = *model;
  if (const GgufValue* pre = file.find("tokenizer.ggml.pre")) {
    const std::string* text = pre->as_string();
    if (text == nullptr) {
      return make_error(StatusCode::kInvalidArgument, "tokenizer.ggml.pre: expected a string");
    }
    data.pre = *text;
  }

  LS_ASSIGN_OR_RETURN(const GgufArray* tokens,
                      get_typed_array(file, "tokenizer.ggml.tokens", true, false));
  if (tokens == nullptr)
    return make_error(StatusCode::kNotFound, "tokenizer.ggml.tokens is missing");
  data.tokens = tokens->strings;

  LS_ASSIGN_OR_RETURN(const GgufArray* scores,
                      get_typed_array(file, "tokenizer.ggml.scores", false, true));
  if (scores != nullptr) data.scores.assign(scores->floats.begin(), scores->floats.end());

  LS_ASSIGN_OR_RETURN(const GgufArray* types,
                      get_typed_array(file, "tokenizer.ggml.token_type", false, false));
  if (types != nullptr) {
    data.token_types.reserve(types->ints.size());
    for (const int64_t type : types->ints) {
      if (type < 0 || type > static_cast<int64_t>(TokenType::kByte)) {
        return make_error(StatusCode::kInvalidArgument,
                          "tokenizer.ggml.token_type: unknown type {} at index {}", type,
                          data.token_types.size());
      }
      data.token_types.push_back(static_cast<TokenType>(type));
    }
  }

  LS_ASSIGN_OR_RETURN(const GgufArray* merges,
                      get_typed_array(file, "tokenizer.ggml.merges", true, false));
  if (merges != nullptr) data.merges = merges->strings;

  LS_ASSIGN_OR_RETURN(data.bos_id, get_id(file, "tokenizer.ggml.bos_token_id"));
  LS_ASSIGN_OR_RETURN(data.eos_id, get_id(file, "tokenizer.ggml.eos_token_id"));
  LS_ASSIGN_OR_RETURN(data.unk_id, get_id(file, "tokenizer.ggml.unknown_token_id"));
  LS_ASSIGN_OR_RETURN(data.pad_id, get_id(file, "tokenizer.ggml.padding_token_id"));
  LS_ASSIGN_OR_RETURN(data.eot_id, get_id(file, "tokenizer.ggml.eot_token_id"));
  // Some converters write a padding id equal to the vocabulary size; padding is never
  // produced by the tokenizer, so an unusable one is dropped rather than rejected.
  if (data.pad_id && static_cast<size_t>(*data.pad_id) >= data.tokens.size()) data.pad_id.reset();

  const bool spm = data.model == "llama";
  const bool llama3_pre = !spm && pre_tokenizer_from_name(data.pre).is_ok() &&
                          *pre_tokenizer_from_name(data.pre) == PreTokenizerKind::kLlama3;
  LS_ASSIGN_OR_RETURN(data.add_bos, get_flag(file, "tokenizer.ggml.add_bos_token",
                                             (spm || llama3_pre) && data.bos_id.has_value()));
  LS_ASSIGN_OR_RETURN(data.add_eos, get_flag(file, "tokenizer.ggml.add_eos_token", false));
  LS_ASSIGN_OR_RETURN(data.add_space_prefix,
                      get_flag(file, "tokenizer.ggml.add_space_prefix", spm));
  if (data.add_bos && !data.bos_id) {
    return make_error(
        StatusCode::kInvalidArgument,
        "tokenizer.ggml.add_bos_token is set but tokenizer.ggml.bos_token_id is missing");
  }

  if (const GgufValue* chat = file.find("tokenizer.chat_template")) {
    const std::string* text = chat->as_string();
    if (text == nullptr) {
      return make_error(StatusCode::kInvalidArgument, "tokenizer.chat_template: expected a string");
    }
    data.chat_template = *text;
  }
  LS_RETURN_IF_ERROR(validate_tokenizer_data(data));
  return data;
}

}  // namespace

Result<TokenizerData> tokenizer_data_from_gguf(const GgufFile& file) {
  Result<TokenizerData> data = read_tokenizer_data(file);
  if (!data.is_ok()) {
    const std::string where = file.path().empty() ? "reading the tokenizer" : file.path();
    return data.status().with_context(where);
  }
  return data;
}

Result<Tokenizer> Tokenizer::from_gguf(const GgufFile& file) {
  LS_ASSIGN_OR_RETURN(TokenizerData data, tokenizer_data_from_gguf(file));
  Result<Tokenizer> tokenizer = create(std::move(data));
  if (!tokenizer.is_ok()) return tokenizer.status().with_context(file.path());
  return tokenizer;
}

}  // namespace llamaserve
