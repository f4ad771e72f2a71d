#include "model/importers/hf_tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/importers/json_input.h"

namespace llamaserve {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr uint64_t kMaxJsonBytes = 256ull << 20;

// SentencePiece model types (TrainerSpec.model_type).
constexpr int32_t kSpmBpe = 2;

Result<std::string> read_text(const fs::path& path) {
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  if (ec)
    return make_error(StatusCode::kNotFound, "cannot read '{}': {}", path.string(), ec.message());
  if (size > kMaxJsonBytes) {
    return make_error(StatusCode::kInvalidArgument, "'{}' is {} bytes, more than the {} allowed",
                      path.string(), size, kMaxJsonBytes);
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) return make_error(StatusCode::kIo, "cannot read '{}'", path.string());
  return text.str();
}

// The pre-tokenizer name GGUF uses for a byte-level tokenizer.json's pre_tokenizer section.
Result<std::string> detect_pre_tokenizer(const json& pre) {
  std::vector<const json*> steps;
  if (pre.is_object() && pre.value("type", "") == "Sequence" && pre.contains("pretokenizers") &&
      pre["pretokenizers"].is_array()) {
    for (const json& step : pre["pretokenizers"]) steps.push_back(&step);
  } else if (pre.is_object()) {
    steps.push_back(&pre);
  }
  bool byte_level = false, byte_level_regex = false, single_digits = false;
  std::string split_regex;
  for (const json* step : steps) {
    if (!step->is_object()) continue;
    const std::string type = step->value("type", "");
    if (type == "ByteLevel") {
      byte_level = true;
      byte_level_regex = step->value("use_regex", true);
    } else if (type == "Digits") {
      single_digits = step->value("individual_digits", false);
    } else if (type == "Split" && step->contains("pattern") && (*step)["pattern"].is_object()) {
      split_regex = (*step)["pattern"].value("Regex", "");
    }
  }
  if (!byte_level) {
    return make_error(StatusCode::kUnsupported,
                      "tokenizer.json: the pre-tokenizer {} has no ByteLevel step; only byte-level "
                      "BPE tokenizers (or a SentencePiece tokenizer.model) are supported",
                      pre.dump().substr(0, 200));
  }
  // Split regexes of the known families; both are GPT-4-style patterns that differ in how
  // many digits a number piece takes.
  if (!split_regex.empty() && !byte_level_regex) {
    if (split_regex.find("\\p{N}{1,3}") != std::string::npos) return std::string("llama-bpe");
    if (split_regex.find("\\p{N}|") != std::string::npos) return std::string("qwen2");
  }
  if (split_regex.empty() && byte_level_regex)
    return std::string(single_digits ? "smollm" : "gpt2");
  return make_error(StatusCode::kUnsupported,
                    "tokenizer.json: pre-tokenizer not recognised (known: llama-bpe, qwen2, "
                    "smollm, gpt2): {}",
                    pre.dump().substr(0, 300));
}

// Text of a special token entry in tokenizer_config.json: "<s>" or {"content": "<s>", ...}.
std::optional<std::string> token_text(const json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value["content"].is_string())
    return value["content"].get<std::string>();
  return std::nullopt;
}

Status set_id_by_text(const TokenizerData& data, const json& config, const char* key,
                      std::optional<int32_t>* id) {
  if (!config.contains(key) || config[key].is_null()) return Status::ok();
  const std::optional<std::string> text = token_text(config[key]);
  if (!text) {
    return make_error(StatusCode::kInvalidArgument, "tokenizer_config.json: '{}' is not a token",
                      key);
  }
  for (size_t i = 0; i < data.tokens.size(); ++i) {
    if (data.tokens[i] == *text) {
      *id = static_cast<int32_t>(i);
      return Status::ok();
    }
  }
  return make_error(StatusCode::kInvalidArgument,
                    "tokenizer_config.json: {} '{}' is not in the vocabulary", key, *text);
}

std::optional<int32_t> find_token(const TokenizerData& data, std::string_view text) {
  for (size_t i = 0; i < data.tokens.size(); ++i) {
    if (data.tokens[i] == text) return static_cast<int32_t>(i);
  }
  return std::nullopt;
}

}  // namespace

Result<TokenizerData> tokenizer_from_sentencepiece(const SentencePieceModel& model) {
  if (model.model_type != kSpmBpe) {
    return make_error(StatusCode::kUnsupported,
                      "tokenizer.model: SentencePiece model type {} is not supported (only BPE, "
                      "type 2, as LLaMA 2 and Mistral use)",
                      model.model_type);
  }
  TokenizerData data;
  data.model = "llama";
  data.pre = "default";
  data.tokens = model.pieces;
  data.scores = model.scores;
  data.token_types.reserve(model.types.size());
  for (int32_t type : model.types) data.token_types.push_back(static_cast<TokenType>(type));
  const auto n = static_cast<int32_t>(model.pieces.size());
  auto id_if_valid = [n](int32_t id) -> std::optional<int32_t> {
    return id >= 0 && id < n ? std::optional<int32_t>(id) : std::nullopt;
  };
  data.unk_id = id_if_valid(model.unk_id);
  data.bos_id = id_if_valid(model.bos_id);
  data.eos_id = id_if_valid(model.eos_id);
  data.pad_id = id_if_valid(model.pad_id);
  data.add_bos = data.bos_id.has_value();
  data.add_eos = false;
  data.add_space_prefix = model.add_dummy_prefix;
  return data;
}

namespace {

Result<TokenizerData> tokenizer_from_hf_json_impl(std::string_view tokenizer_json) {
  LS_RETURN_IF_ERROR(check_json_nesting(tokenizer_json, "tokenizer.json"));
  json root = json::parse(tokenizer_json, nullptr, false);
  if (root.is_discarded() || !root.is_object()) {
    return make_error(StatusCode::kInvalidArgument, "tokenizer.json is not a JSON object");
  }
  if (!root.contains("model") || !root["model"].is_object()) {
    return make_error(StatusCode::kInvalidArgument, "tokenizer.json has no 'model' object");
  }
  const json& model = root["model"];
  const std::string type = model.value("type", "BPE");
  if (type != "BPE") {
    return make_error(StatusCode::kUnsupported,
                      "tokenizer.json: model type '{}' is not supported (BPE only)", type);
  }
  if (model.value("byte_fallback", false)) {
    return make_error(StatusCode::kUnsupported,
                      "tokenizer.json describes a SentencePiece-style BPE (byte_fallback); convert "
                      "needs its tokenizer.model next to it");
  }
  TokenizerData data;
  data.model = "gpt2";
  const json pre = root.contains("pre_tokenizer") ? root["pre_tokenizer"] : json();
  LS_ASSIGN_OR_RETURN(data.pre, detect_pre_tokenizer(pre));

  if (!model.contains("vocab") || !model["vocab"].is_object()) {
    return make_error(StatusCode::kInvalidArgument, "tokenizer.json: model.vocab is not an object");
  }
  std::vector<std::optional<std::string>> by_id;
  auto place = [&](int64_t id, const std::string& text) -> Status {
    if (id < 0 || id >= kMaxVocabSize) {
      return make_error(StatusCode::kInvalidArgument,
                        "tokenizer.json: token id {} of '{}' is out of range", id, text);
    }
    if (static_cast<size_t>(id) >= by_id.size()) by_id.resize(static_cast<size_t>(id) + 1);
    by_id[id] = text;
    return Status::ok();
  };
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
    if (!it.value().is_number_integer()) {
      return make_error(StatusCode::kInvalidArgument, "tokenizer.json: vocab['{}'] is not an id",
                        it.key());
    }
    LS_RETURN_IF_ERROR(place(it.value().get<int64_t>(), it.key()));
  }
  // Added tokens: special ones are control tokens, the others user-defined (always matched).
  std::unordered_map<int64_t, TokenType> added_types;
  if (root.contains("added_tokens") && root["added_tokens"].is_array()) {
    for (const json& added : root["added_tokens"]) {
      if (!added.is_object() || !added.contains("id") || !added["id"].is_number_integer() ||
          !added.contains("content") || !added["content"].is_string()) {
        return make_error(StatusCode::kInvalidArgument,
                          "tokenizer.json: an added_tokens entry lacks an integer 'id' or a "
                          "string 'content'");
      }
      const int64_t id = added["id"].get<int64_t>();
      LS_RETURN_IF_ERROR(place(id, added["content"].get<std::string>()));
      added_types[id] =
          added.value("special", false) ? TokenType::kControl : TokenType::kUserDefined;
    }
  }
  data.tokens.reserve(by_id.size());
  data.token_types.reserve(by_id.size());
  for (size_t id = 0; id < by_id.size(); ++id) {
    if (by_id[id]) {
      data.tokens.push_back(*by_id[id]);
      const auto added = added_types.find(static_cast<int64_t>(id));
      data.token_types.push_back(added == added_types.end() ? TokenType::kNormal : added->second);
    } else {
      data.tokens.push_back(fmt::format("[PAD{}]", id));
      data.token_types.push_back(TokenType::kUnused);
    }
  }

  if (!model.contains("merges") || !model["merges"].is_array()) {
    return make_error(StatusCode::kInvalidArgument, "tokenizer.json: model.merges is not a list");
  }
  data.merges.reserve(model["merges"].size());
  for (const json& merge : model["merges"]) {
    // Both forms become GGUF's "a b"; the pieces themselves never hold a space (byte-level
    // BPE writes it as U+0120), so the one space is where the engine splits the pair.
    std::string text;
    if (merge.is_string()) {
      text = merge.get<std::string>();
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      text = merge[0].get<std::string>() + " " + merge[1].get<std::string>();
    } else {
      return make_error(StatusCode::kInvalidArgument,
                        "tokenizer.json: a merge is neither \"a b\" nor [\"a\", \"b\"]: {}",
                        merge.dump().substr(0, 100));
    }
    const size_t space = text.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == text.size() ||
        text.find(' ', space + 1) != std::string::npos) {
      return make_error(StatusCode::kInvalidArgument,
                        "tokenizer.json: merge {} is not two non-empty pieces without spaces",
                        merge.dump().substr(0, 100));
    }
    data.merges.push_back(std::move(text));
  }

  // A post-processor template that starts with a special token adds it as BOS.
  std::vector<const json*> processors;
  if (root.contains("post_processor") && root["post_processor"].is_object()) {
    const json& post = root["post_processor"];
    if (post.value("type", "") == "Sequence" && post.contains("processors") &&
        post["processors"].is_array()) {
      for (const json& p : post["processors"]) processors.push_back(&p);
    } else {
      processors.push_back(&post);
    }
  }
  for (const json* p : processors) {
    if (!p->is_object() || p->value("type", "") != "TemplateProcessing") continue;
    if (!p->contains("single") || !(*p)["single"].is_array() || (*p)["single"].empty()) continue;
    const json& first = (*p)["single"][0];
    if (first.is_object() && first.contains("SpecialToken") && first["SpecialToken"].is_object()) {
      const std::string text = first["SpecialToken"].value("id", "");
      if (const std::optional<int32_t> id = find_token(data, text)) {
        data.bos_id = *id;
        data.add_bos = true;
      }
    }
  }
  return data;
}

Status apply_tokenizer_config_impl(std::string_view config_json, TokenizerData& data) {
  LS_RETURN_IF_ERROR(check_json_nesting(config_json, "tokenizer_config.json"));
  json config = json::parse(config_json, nullptr, false);
  if (config.is_discarded() || !config.is_object()) {
    return make_error(StatusCode::kInvalidArgument, "tokenizer_config.json is not a JSON object");
  }
  LS_RETURN_IF_ERROR(set_id_by_text(data, config, "bos_token", &data.bos_id));
  LS_RETURN_IF_ERROR(set_id_by_text(data, config, "eos_token", &data.eos_id));
  LS_RETURN_IF_ERROR(set_id_by_text(data, config, "unk_token", &data.unk_id));
  LS_RETURN_IF_ERROR(set_id_by_text(data, config, "pad_token", &data.pad_id));
  if (config.contains("add_bos_token") && config["add_bos_token"].is_boolean())
    data.add_bos = config["add_bos_token"].get<bool>();
  if (config.contains("add_eos_token") && config["add_eos_token"].is_boolean())
    data.add_eos = config["add_eos_token"].get<bool>();
  if (config.contains("chat_template")) {
    const json& t = config["chat_template"];
    if (t.is_string()) {
      data.chat_template = t.get<std::string>();
    } else if (t.is_array()) {
      for (const json& entry : t) {
        if (entry.is_object() && entry.value("name", "") == "default" &&
            entry.contains("template") && entry["template"].is_string()) {
          data.chat_template = entry["template"].get<std::string>();
        }
      }
    }
  }
  return Status::ok();
}

}  // namespace

// nlohmann::json's value() and get() throw on a type mismatch; a hostile file must get an
// error message, not an abort.
Result<TokenizerData> tokenizer_from_hf_json(std::string_view tokenizer_json) {
  try {
    return tokenizer_from_hf_json_impl(tokenizer_json);
  } catch (const json::exception& e) {
    return make_error(StatusCode::kInvalidArgument, "tokenizer.json: unexpected JSON: {}",
                      e.what());
  }
}

Status apply_tokenizer_config(std::string_view config_json, TokenizerData& data) {
  try {
    return apply_tokenizer_config_impl(config_json, data);
  } catch (const json::exception& e) {
    return make_error(StatusCode::kInvalidArgument, "tokenizer_config.json: unexpected JSON: {}",
                      e.what());
  }
}

Status pad_vocabulary(TokenizerData& data, int64_t n_vocab) {
  const auto n_tokens = static_cast<int64_t>(data.tokens.size());
  if (n_tokens > n_vocab) {
    return make_error(
        StatusCode::kInvalidArgument,
        "the tokenizer has {} tokens but the model's embedding table has only {} rows", n_tokens,
        n_vocab);
  }
  const bool has_scores = !data.scores.empty();
  if (data.token_types.empty()) data.token_types.assign(data.tokens.size(), TokenType::kNormal);
  for (int64_t id = n_tokens; id < n_vocab; ++id) {
    data.tokens.push_back(fmt::format("[PAD{}]", id));
    data.token_types.push_back(TokenType::kUnused);
    if (has_scores) data.scores.push_back(-1000.0f);  // never preferred by score-ranked merges
  }
  return Status::ok();
}

Result<TokenizerData> hf_tokenizer_from_files(const HfTokenizerFiles& files,
                                              const HfTokenizerDefaults& defaults) {
  TokenizerData data;
  if (files.tokenizer_model) {
    const std::string& bytes = *files.tokenizer_model;
    LS_ASSIGN_OR_RETURN(
        SentencePieceModel spm,
        parse_sentencepiece_model(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
    LS_ASSIGN_OR_RETURN(data, tokenizer_from_sentencepiece(spm));
  } else if (files.tokenizer_json) {
    LS_ASSIGN_OR_RETURN(data, tokenizer_from_hf_json(*files.tokenizer_json));
    // Without tokenizer_config.json, config.json's ids are the best guess.
    if (defaults.bos_token_id && !data.bos_id)
      data.bos_id = static_cast<int32_t>(*defaults.bos_token_id);
    if (defaults.eos_token_id) data.eos_id = static_cast<int32_t>(*defaults.eos_token_id);
  } else {
    return make_error(StatusCode::kNotFound,
                      "neither tokenizer.model (SentencePiece) nor tokenizer.json is present");
  }
  if (files.tokenizer_config_json) {
    LS_RETURN_IF_ERROR(apply_tokenizer_config(*files.tokenizer_config_json, data));
  }
  if (data.chat_template.empty() && files.chat_template_jinja) {
    data.chat_template = *files.chat_template_jinja;
  }
  // End-of-turn markers of the chat formats the engine knows.
  for (const char* eot : {"<|eot_id|>", "<|im_end|>"}) {
    if (const std::optional<int32_t> id = find_token(data, eot)) {
      data.eot_id = *id;
      break;
    }
  }
  LS_RETURN_IF_ERROR(pad_vocabulary(data, defaults.n_vocab));
  LS_RETURN_IF_ERROR(validate_tokenizer_data(data));
  return data;
}

Result<TokenizerData> read_hf_tokenizer(const std::string& dir,
                                        const HfTokenizerDefaults& defaults) {
  const fs::path root(dir);
  std::error_code ec;
  const fs::path spm_path = root / "tokenizer.model";
  const fs::path json_path = root / "tokenizer.json";
  if (!fs::exists(spm_path, ec) && !fs::exists(json_path, ec)) {
    return make_error(StatusCode::kNotFound,
                      "'{}' has neither tokenizer.model (SentencePiece) nor tokenizer.json", dir);
  }
  HfTokenizerFiles files;
  // tokenizer.json (megabytes) is read only when it is the one used.
  if (fs::exists(spm_path, ec)) {
    LS_ASSIGN_OR_RETURN(files.tokenizer_model, read_text(spm_path));
  } else {
    LS_ASSIGN_OR_RETURN(files.tokenizer_json, read_text(json_path));
  }
  for (const auto& [name, file] : {std::pair{"tokenizer_config.json", &files.tokenizer_config_json},
                                   std::pair{"chat_template.jinja", &files.chat_template_jinja}}) {
    if (fs::exists(root / name, ec)) {
      LS_ASSIGN_OR_RETURN(*file, read_text(root / name));
    }
  }
  Result<TokenizerData> data = hf_tokenizer_from_files(files, defaults);
  if (!data.is_ok()) return data.status().with_context(fmt::format("tokenizer of '{}'", dir));
  return data;
}

}  // namespace llamaserve
