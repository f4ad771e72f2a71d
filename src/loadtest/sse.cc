#include "loadtest/sse.h"

#include <nlohmann/json.hpp>

namespace llamaserve::loadtest {

Status SseParser::feed(std::string_view bytes, std::vector<SseEvent>& out) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    if (after_cr_) {
      after_cr_ = false;
      if (bytes[pos] == '\n') {
        ++pos;
        continue;
      }
    }
    const size_t end = bytes.find_first_of("\r\n", pos);
    const size_t stop = end == std::string_view::npos ? bytes.size() : end;
    if (line_.size() + (stop - pos) > kMaxLineBytes) {
      return make_error(StatusCode::kOutOfRange, "an event-stream line longer than {} bytes",
                        kMaxLineBytes);
    }
    line_.append(bytes.substr(pos, stop - pos));
    if (end == std::string_view::npos) break;
    after_cr_ = bytes[end] == '\r';
    pos = end + 1;
    end_line(out);
  }
  return Status::ok();
}

void SseParser::end_line(std::vector<SseEvent>& out) {
  if (line_.empty()) {
    if (has_data_) out.push_back(std::move(event_));
    event_ = SseEvent{};
    has_data_ = false;
    return;
  }
  if (line_.front() != ':') {
    const size_t colon = line_.find(':');
    const std::string_view line(line_);
    const std::string_view field = line.substr(0, colon);
    std::string_view value = colon == std::string_view::npos ? "" : line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    if (field == "data") {
      if (has_data_) event_.data.push_back('\n');
      event_.data.append(value);
      has_data_ = true;
    } else if (field == "event") {
      event_.type = value.empty() ? "message" : std::string(value);
    }
  }
  line_.clear();
}

namespace {

bool non_empty_string(const nlohmann::json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_string() && !it->get_ref<const std::string&>().empty();
}

}  // namespace

StreamChunk read_stream_chunk(std::string_view data) {
  StreamChunk chunk;
  if (data == "[DONE]") {
    chunk.done = true;
    return chunk;
  }
  const nlohmann::json json = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    chunk.error = "an event that is not a JSON object: " + std::string(data.substr(0, 200));
    return chunk;
  }
  if (const auto error = json.find("error"); error != json.end() && !error->is_null()) {
    chunk.error =
        error->is_object() && error->contains("message") && (*error)["message"].is_string()
            ? (*error)["message"].get<std::string>()
            : error->dump();
    return chunk;
  }
  if (const auto choices = json.find("choices"); choices != json.end() && choices->is_array() &&
                                                 !choices->empty() && (*choices)[0].is_object()) {
    const nlohmann::json& choice = (*choices)[0];
    if (non_empty_string(choice, "text")) chunk.content = true;
    if (const auto delta = choice.find("delta"); delta != choice.end() && delta->is_object()) {
      if (non_empty_string(*delta, "content")) chunk.content = true;
    }
  }
  if (const auto usage = json.find("usage"); usage != json.end() && usage->is_object()) {
    const auto read = [&](const char* key, int64_t& out) {
      const auto it = usage->find(key);
      if (it != usage->end() && it->is_number_integer()) out = it->get<int64_t>();
    };
    read("completion_tokens", chunk.completion_tokens);
    read("prompt_tokens", chunk.prompt_tokens);
  }
  return chunk;
}

}  // namespace llamaserve::loadtest
