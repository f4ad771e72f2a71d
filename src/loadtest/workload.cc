#include "loadtest/workload.h"

#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace llamaserve::loadtest {

int32_t draw_length(const LengthRange& range, std::mt19937_64& rng) {
  if (range.fixed()) return range.min;
  return std::uniform_int_distribution<int32_t>(range.min, range.max)(rng);
}

PoissonSchedule::PoissonSchedule(double rate_per_s, uint64_t seed)
    : rng_(seed), gap_s_(rate_per_s) {}

double PoissonSchedule::next_s() {
  now_s_ += gap_s_(rng_);
  return now_s_;
}

namespace {

Status line_error(const std::string& name, size_t line, const std::string& what) {
  return make_error(StatusCode::kInvalidArgument, "{}:{}: {}", name, line, what);
}

}  // namespace

Result<std::vector<PromptLine>> read_prompt_lines(std::istream& in, const std::string& name) {
  std::vector<PromptLine> out;
  std::string text;
  size_t number = 0;
  while (std::getline(in, text)) {
    ++number;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (json.is_discarded()) return line_error(name, number, "not valid JSON");
    if (!json.is_object()) return line_error(name, number, "expected a JSON object");
    PromptLine line;
    const auto prompt = json.find("prompt");
    const auto messages = json.find("messages");
    if (prompt != json.end()) {
      if (!prompt->is_string() || prompt->get_ref<const std::string&>().empty()) {
        return line_error(name, number, "\"prompt\" must be a non-empty string");
      }
      line.prompt = prompt->get<std::string>();
    } else if (messages != json.end()) {
      if (!messages->is_array() || messages->empty()) {
        return line_error(name, number, "\"messages\" must be a non-empty array");
      }
      for (const nlohmann::json& message : *messages) {
        if (!message.is_object() || !message.contains("role") || !message.contains("content")) {
          return line_error(name, number, "each message needs \"role\" and \"content\"");
        }
      }
      line.messages = *messages;
    } else {
      return line_error(name, number, "needs \"prompt\" or \"messages\"");
    }
    if (const auto max_tokens = json.find("max_tokens"); max_tokens != json.end()) {
      if (!max_tokens->is_number_integer() || max_tokens->get<int64_t>() < 1 ||
          max_tokens->get<int64_t>() > (1 << 24)) {
        return line_error(name, number, "\"max_tokens\" must be a positive integer");
      }
      line.max_tokens = max_tokens->get<int32_t>();
    }
    out.push_back(std::move(line));
  }
  if (out.empty()) {
    return make_error(StatusCode::kInvalidArgument,
                      "{}: no prompts (expected one JSON object "
                      "per line)",
                      name);
  }
  return out;
}

Result<std::vector<PromptLine>> read_prompt_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return make_error(StatusCode::kNotFound, "cannot open prompts file {}", path);
  return read_prompt_lines(in, path);
}

const std::vector<std::string>& RequestGenerator::words() {
  static const std::vector<std::string> kWords = {
      "the",   "of",     "and",    "to",     "in",    "is",    "that",  "for",   "it",    "as",
      "was",   "with",   "be",     "by",     "on",    "not",   "he",    "this",  "are",   "or",
      "his",   "from",   "at",     "which",  "but",   "have",  "an",    "had",   "they",  "you",
      "were",  "their",  "one",    "all",    "we",    "can",   "her",   "has",   "there", "been",
      "if",    "more",   "when",   "will",   "would", "who",   "so",    "no",    "time",  "people",
      "new",   "first",  "water",  "world",  "year",  "day",   "house", "city",  "light", "book",
      "river", "music",  "story",  "school", "game",  "road",  "table", "money", "paper", "place",
      "work",  "night",  "small",  "great",  "long",  "good",  "old",   "right", "big",   "high",
      "last",  "open",   "green",  "black",  "white", "red",   "blue",  "north", "south", "east",
      "west",  "little", "number", "part",   "way",   "point", "state", "group", "home"};
  return kWords;
}

Result<RequestGenerator> RequestGenerator::create(const LoadtestConfig& config,
                                                  std::vector<int32_t> token_pool,
                                                  std::string model, uint64_t run_salt) {
  RequestGenerator g;
  g.config_ = config;
  g.token_pool_ = std::move(token_pool);
  g.model_ = std::move(model);
  g.run_salt_ = run_salt;
  if (!config.prompts_file.empty()) {
    LS_ASSIGN_OR_RETURN(g.lines_, read_prompt_file(config.prompts_file));
    g.token_pool_.clear();  // the file's text is the prompt
    for (size_t i = 0; i < g.lines_.size(); ++i) {
      if (config.endpoint == Endpoint::kCompletions && g.lines_[i].prompt.empty()) {
        return make_error(StatusCode::kInvalidArgument,
                          "{}: prompt {} has \"messages\" and no \"prompt\"; use --endpoint chat",
                          config.prompts_file, i + 1);
      }
    }
  }
  // The shared prefix is drawn from its own generator, so it is the same for every request.
  std::mt19937_64 rng(config.seed ^ 0x5eed5eedULL);
  if (g.token_prompts()) {
    for (int32_t i = 0; i < config.shared_prefix_tokens; ++i) {
      g.shared_prefix_tokens_.push_back(g.token_pool_[rng() % g.token_pool_.size()]);
    }
  } else {
    for (int32_t i = 0; i < config.shared_prefix_tokens; ++i) {
      g.shared_prefix_text_ += words()[rng() % words().size()] + " ";
    }
  }
  return g;
}

nlohmann::json RequestGenerator::token_prompt(int64_t index, int32_t length,
                                              std::mt19937_64& rng) const {
  std::vector<int32_t> tokens = shared_prefix_tokens_;
  const uint64_t pool = token_pool_.size();
  // The tag: the index in base `pool` (least significant digit first, so that neighbouring
  // requests differ from their first token on), then two tokens of the run's salt.
  std::vector<int32_t> tag;
  uint64_t rest = static_cast<uint64_t>(index);
  for (int i = 0; i < 3; ++i, rest /= pool) tag.push_back(token_pool_[rest % pool]);
  tag.push_back(token_pool_[run_salt_ % pool]);
  tag.push_back(token_pool_[(run_salt_ / pool) % pool]);
  for (int32_t t : tag) {
    if (static_cast<int32_t>(tokens.size()) < length) tokens.push_back(t);
  }
  while (static_cast<int32_t>(tokens.size()) < length) {
    tokens.push_back(token_pool_[rng() % pool]);
  }
  return tokens;
}

std::string RequestGenerator::text_tag(int64_t index) const {
  return fmt::format("[{}-{:x}]", index, run_salt_ & 0xffffffffULL);
}

std::string RequestGenerator::text_prompt(int64_t index, int32_t length,
                                          std::mt19937_64& rng) const {
  std::string text = shared_prefix_text_ + text_tag(index);
  for (int32_t i = config_.shared_prefix_tokens + 1; i < length; ++i) {
    text += " " + words()[rng() % words().size()];
  }
  return text;
}

PlannedRequest RequestGenerator::make(int64_t index) const {
  // Each index draws from its own generator: the same request whatever the order of calls.
  std::mt19937_64 rng(config_.seed * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(index));
  PlannedRequest out;
  nlohmann::json body;
  if (!model_.empty()) body["model"] = model_;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  const bool chat = config_.endpoint == Endpoint::kChat;
  out.target = chat ? "/v1/chat/completions" : "/v1/completions";
  out.max_tokens = draw_length(config_.output_tokens, rng);
  if (!lines_.empty()) {
    const PromptLine& line = lines_[static_cast<size_t>(index) % lines_.size()];
    if (line.max_tokens > 0) out.max_tokens = line.max_tokens;
    const std::string tag = shared_prefix_text_ + text_tag(index) + " ";
    if (!line.messages.is_null()) {
      nlohmann::json messages = line.messages;
      nlohmann::json& first = messages[0]["content"];
      if (first.is_string()) first = tag + first.get<std::string>();
      body["messages"] = std::move(messages);
    } else if (chat) {
      body["messages"] = {{{"role", "user"}, {"content", tag + line.prompt}}};
    } else {
      body["prompt"] = tag + line.prompt;
    }
  } else {
    const int32_t length = draw_length(config_.prompt_tokens, rng);
    if (token_prompts()) {
      body["prompt"] = token_prompt(index, length, rng);
      out.planned_prompt_tokens = length;
    } else if (chat) {
      body["messages"] = {{{"role", "user"}, {"content", text_prompt(index, length, rng)}}};
    } else {
      body["prompt"] = text_prompt(index, length, rng);
    }
  }
  body["max_tokens"] = out.max_tokens;
  if (config_.ignore_eos) body["ignore_eos"] = true;
  if (config_.temperature) body["temperature"] = *config_.temperature;
  out.body = body.dump();
  return out;
}

}  // namespace llamaserve::loadtest
