#include "tokenizer/tokenizer_data.h"

#include <limits>

namespace llamaserve {
namespace {

Status check_id(const char* name, const std::optional<int32_t>& id, size_t n_vocab) {
  if (id && (*id < 0 || static_cast<size_t>(*id) >= n_vocab)) {
    return make_error(StatusCode::kInvalidArgument,
                      "tokenizer: {} {} is outside the vocabulary (0..{})", name, *id, n_vocab - 1);
  }
  return Status::ok();
}

}  // namespace

Status validate_tokenizer_data(const TokenizerData& data) {
  if (data.model != "llama" && data.model != "gpt2") {
    return make_error(StatusCode::kUnsupported,
                      "tokenizer: model '{}' is not supported (expected 'llama' or 'gpt2')",
                      data.model);
  }
  const size_t n_vocab = data.tokens.size();
  if (n_vocab == 0)
    return make_error(StatusCode::kInvalidArgument, "tokenizer: the vocabulary is empty");
  if (n_vocab > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return make_error(StatusCode::kOutOfRange, "tokenizer: {} tokens do not fit 32-bit ids",
                      n_vocab);
  }
  if (!data.scores.empty() && data.scores.size() != n_vocab) {
    return make_error(StatusCode::kInvalidArgument, "tokenizer: {} scores for {} tokens",
                      data.scores.size(), n_vocab);
  }
  if (!data.token_types.empty() && data.token_types.size() != n_vocab) {
    return make_error(StatusCode::kInvalidArgument, "tokenizer: {} token types for {} tokens",
                      data.token_types.size(), n_vocab);
  }
  for (size_t id = 0; id < data.token_types.size(); ++id) {
    const auto type = static_cast<int32_t>(data.token_types[id]);
    if (type < 0 || type > static_cast<int32_t>(TokenType::kByte)) {
      return make_error(StatusCode::kInvalidArgument, "tokenizer: token {} has unknown type {}", id,
                        type);
    }
  }
  LS_RETURN_IF_ERROR(check_id("bos id", data.bos_id, n_vocab));
  LS_RETURN_IF_ERROR(check_id("eos id", data.eos_id, n_vocab));
  LS_RETURN_IF_ERROR(check_id("unknown-token id", data.unk_id, n_vocab));
  LS_RETURN_IF_ERROR(check_id("padding id", data.pad_id, n_vocab));
  LS_RETURN_IF_ERROR(check_id("eot id", data.eot_id, n_vocab));
  if (data.add_bos && !data.bos_id) {
    return make_error(StatusCode::kInvalidArgument,
                      "tokenizer: add_bos is set but there is no bos id");
  }
  if (data.add_eos && !data.eos_id) {
    return make_error(StatusCode::kInvalidArgument,
                      "tokenizer: add_eos is set but there is no eos id");
  }
  return Status::ok();
}

}  // namespace llamaserve
