// libFuzzer target for the tokenizers, the streaming detokenizer and the chat formats, on the
// real vocabularies (the LLaMA 2 SentencePiece and LLaMA 3 byte-level BPE fixtures, and
// SmolLM2's when the model file is present). Input layout:
//   byte 0     which tokenizer (modulo the number loaded)
//   the rest   text; the same bytes are also read as token ids and as chat messages
// Besides "never crash" (ASan/UBSan), it checks on every input:
//   - encode gives ids inside the vocabulary; decode(encode(s)) == s when every byte of s
//     round-trips on its own (byte-level BPE with and without special parsing; SentencePiece
//     without special parsing and when s has no literal U+2581, decoded as a space);
//   - decode and StreamDecoder accept any ids, out-of-range ones included, and skip those;
//     the stream output is valid UTF-8 and equals the whole token text sanitized at once;
//   - chat prompts: apply() == render().text, content ranges sorted, disjoint, inside the text
//     and taken from the messages; encode_guarded puts no control token inside a
//     content range and (byte-level BPE) decodes back to the prompt.
// A violated property aborts, which libFuzzer reports as a crash with the input saved.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf.h"
#include "server/utf8.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace llamaserve {
namespace {

// Messages beyond this many are ignored: the formats are linear, more only costs time.
constexpr size_t kMaxMessages = 32;
constexpr char kMessageSeparator = '\x01';
constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

[[noreturn]] void fail(const char* what, std::string_view detail = {}) {
  std::fprintf(stderr, "tokenizer_fuzz property violated: %s\n", what);
  if (!detail.empty()) {
    std::fprintf(stderr, "  detail: \"");
    for (const char c : detail) {
      const auto byte = static_cast<uint8_t>(c);
      if (byte >= 0x20 && byte < 0x7F && c != '\\' && c != '"') {
        std::fputc(c, stderr);
      } else {
        std::fprintf(stderr, "\\x%02X", byte);
      }
    }
    std::fprintf(stderr, "\"\n");
  }
  std::abort();
}

void check(bool condition, const char* what, std::string_view detail = {}) {
  if (!condition) fail(what, detail);
}

struct LoadedTokenizer {
  std::string name;
  Tokenizer tokenizer;
  ChatTemplate chat;  // the model's own format
  // Bytes that encode and decode back on their own. A byte-level vocabulary may lack the
  // alphabet token of a byte (SmolLM2 lacks 0x04, 0xF1, 0xFF and others); such a byte becomes
  // the unknown token, so text containing it cannot round-trip.
  std::array<bool, 256> byte_round_trips{};
};

LoadedTokenizer load(const std::string& path, std::string_view fallback_template) {
  auto file = GgufFile::open(path);
  if (!file.is_ok()) {
    std::fprintf(stderr, "tokenizer_fuzz: cannot open %s: %s\n", path.c_str(),
                 file.status().to_string().c_str());
    std::abort();
  }
  auto tokenizer = Tokenizer::from_gguf(**file);
  if (!tokenizer.is_ok()) {
    std::fprintf(stderr, "tokenizer_fuzz: %s: %s\n", path.c_str(),
                 tokenizer.status().to_string().c_str());
    std::abort();
  }
  // The model's template when it names a known format, otherwise the family's format.
  auto chat = ChatTemplate::detect(tokenizer->data().chat_template);
  if (!chat.is_ok()) chat = ChatTemplate::from_name(fallback_template);
  LoadedTokenizer loaded{path, std::move(tokenizer).value(), std::move(chat).value()};
  for (int b = 0; b < 256; ++b) {
    const std::string byte(1, static_cast<char>(b));
    loaded.byte_round_trips[b] =
        loaded.tokenizer.decode(loaded.tokenizer.encode(byte, false, false), false) == byte;
  }
  return loaded;
}

// Built once: the Llama 3 vocabulary alone takes a noticeable part of a second.
const std::vector<LoadedTokenizer>& tokenizers() {
  static const std::vector<LoadedTokenizer> loaded = [] {
    const std::string fixtures = LLAMASERVE_FIXTURES_DIR;
    std::vector<LoadedTokenizer> out;
    out.push_back(load(fixtures + "/vocab-llama2-spm.gguf", "llama2"));
    out.push_back(load(fixtures + "/vocab-llama3-bpe.gguf", "llama3"));
    const std::string smollm2 =
        std::string(LLAMASERVE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (std::filesystem::exists(smollm2)) out.push_back(load(smollm2, "chatml"));
    return out;
  }();
  return loaded;
}

bool byte_level(const Tokenizer& tokenizer) { return tokenizer.data().model == "gpt2"; }

bool all_bytes_round_trip(const LoadedTokenizer& loaded, std::string_view text) {
  return std::all_of(text.begin(), text.end(),
                     [&](char c) { return loaded.byte_round_trips[static_cast<uint8_t>(c)]; });
}

void check_ids_in_vocab(const Tokenizer& tokenizer, std::span<const int32_t> ids) {
  for (const int32_t id : ids) {
    check(id >= 0 && id < tokenizer.n_vocab(), "encode produced an id outside the vocabulary");
  }
}

// Token ids from raw bytes, 4 at a time: mostly inside the vocabulary, some just past its end,
// some negative, so that every range the API must tolerate is reached.
std::vector<int32_t> ids_from_bytes(std::string_view bytes, int32_t n_vocab) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 4 <= bytes.size(); i += 4) {
    uint32_t raw = 0;
    for (size_t k = 0; k < 4; ++k) raw |= uint32_t(static_cast<uint8_t>(bytes[i + k])) << (8 * k);
    switch (raw >> 30) {
      case 0:
      case 1: ids.push_back(static_cast<int32_t>(raw % static_cast<uint32_t>(n_vocab))); break;
      case 2: ids.push_back(n_vocab + static_cast<int32_t>(raw & 0xFF)); break;
      default: ids.push_back(static_cast<int32_t>(raw)); break;
    }
  }
  return ids;
}

// Streams `ids` one at a time; the output must be valid UTF-8 and equal the concatenated token
// bytes sanitized as a whole (holding back a split character must not change the text).
void check_stream(const Tokenizer& tokenizer, std::span<const int32_t> ids, bool skip_special) {
  StreamDecoder stream(tokenizer, skip_special);
  std::string streamed;
  std::string raw;
  for (const int32_t id : ids) {
    streamed += stream.push(id);
    raw += tokenizer.token_bytes(id, !skip_special);
  }
  streamed += stream.flush();
  check(server::is_valid_utf8(streamed), "stream output is not valid UTF-8", streamed);
  check(streamed == unicode::sanitize_utf8(raw), "stream output differs from sanitized text");
  if (server::is_valid_utf8(raw)) check(streamed == raw, "stream changed valid text");
  check(stream.flush().empty(), "flush left text behind");
}

void check_arbitrary_ids(const Tokenizer& tokenizer, std::string_view bytes) {
  const int32_t n_vocab = tokenizer.n_vocab();
  const std::vector<int32_t> ids = ids_from_bytes(bytes, n_vocab);
  std::vector<int32_t> in_vocab;
  for (const int32_t id : ids) {
    if (id >= 0 && id < n_vocab) {
      in_vocab.push_back(id);
    } else {
      check(tokenizer.token_piece(id).empty() && tokenizer.token_bytes(id, true).empty(),
            "an id outside the vocabulary has text");
      check(!tokenizer.is_special(id) && !tokenizer.is_end_of_generation(id) &&
                tokenizer.token_type(id) == TokenType::kUndefined,
            "an id outside the vocabulary has a type");
    }
  }
  for (const bool skip_special : {false, true}) {
    check(tokenizer.decode(ids, skip_special) == tokenizer.decode(in_vocab, skip_special),
          "decode does not skip ids outside the vocabulary");
    check_stream(tokenizer, ids, skip_special);
  }
}

void check_encode(const LoadedTokenizer& loaded, std::string_view text) {
  const Tokenizer& tokenizer = loaded.tokenizer;
  const std::vector<int32_t> plain = tokenizer.encode(text, false, false);
  const std::vector<int32_t> with_special = tokenizer.encode(text, true, true);
  check_ids_in_vocab(tokenizer, plain);
  check_ids_in_vocab(tokenizer, with_special);
  if (tokenizer.add_bos() && tokenizer.bos_id()) {
    check(!with_special.empty() && with_special.front() == *tokenizer.bos_id(), "BOS missing");
  }
  const bool round_trips = all_bytes_round_trip(loaded, text);
  if (byte_level(tokenizer) && round_trips) {
    // Every byte has a token, and control tokens decode to their own text when not skipped.
    check(tokenizer.decode(plain, false) == text, "decode(encode(s)) != s", text);
    std::span<const int32_t> body(with_special);
    if (tokenizer.add_bos() && tokenizer.bos_id()) body = body.subspan(1);
    if (tokenizer.data().add_eos && tokenizer.eos_id()) body = body.first(body.size() - 1);
    check(tokenizer.decode(body, false) == text, "decode(encode(s, parse_special)) != s", text);
  } else if (!byte_level(tokenizer) && round_trips &&
             text.find(kSpmSpace) == std::string_view::npos) {
    check(tokenizer.decode(plain, true) == text, "decode(encode(s)) != s", text);
  }
  // decode() is raw bytes, but must not fail on any output of encode().
  (void)tokenizer.decode(with_special, true);
  for (const bool skip_special : {false, true}) {
    check_stream(tokenizer, plain, skip_special);
    check_stream(tokenizer, with_special, skip_special);
  }
}

// Messages from the text: chunks between separator bytes; a chunk's first byte picks the role
// (including roles some formats refuse), the rest is the content.
std::vector<ChatMessage> messages_from_text(std::string_view text) {
  static constexpr std::string_view kRoles[] = {"user",    "assistant", "system", "tool",
                                                "ipython", "developer", ""};
  std::vector<ChatMessage> messages;
  size_t start = 0;
  while (start <= text.size() && messages.size() < kMaxMessages) {
    size_t end = text.find(kMessageSeparator, start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view chunk = text.substr(start, end - start);
    ChatMessage message;
    if (!chunk.empty()) {
      message.role = kRoles[static_cast<uint8_t>(chunk[0]) % std::size(kRoles)];
      chunk.remove_prefix(1);
    } else {
      message.role = "user";
    }
    message.content = chunk;
    messages.push_back(std::move(message));
    start = end + 1;
  }
  return messages;
}

void check_prompt_ranges(const ChatPrompt& prompt, const std::vector<ChatMessage>& messages) {
  check(prompt.content_ranges.size() <= messages.size(), "more content ranges than messages");
  size_t previous_end = 0;
  for (const TextRange& range : prompt.content_ranges) {
    check(range.begin < range.end, "empty or inverted content range");
    check(range.begin >= previous_end, "content ranges overlap or are unsorted");
    check(range.end <= prompt.text.size(), "content range outside the prompt");
    previous_end = range.end;
    // Each range is (a trimmed part of) a message. Not necessarily in message order: Llama 2
    // places the system message inside the next user turn.
    const std::string_view content(prompt.text.data() + range.begin, range.end - range.begin);
    check(std::any_of(
              messages.begin(), messages.end(),
              [&](const ChatMessage& m) { return m.content.find(content) != std::string::npos; }),
          "content range not taken from a message", content);
  }
}

// Control tokens of a guarded encoding must come from the template's markup: with exact byte
// offsets (byte-level BPE, where the token bytes concatenate to the text) none may overlap a
// content range.
void check_guarded(const LoadedTokenizer& loaded, const ChatPrompt& prompt) {
  const Tokenizer& tokenizer = loaded.tokenizer;
  const std::vector<int32_t> ids =
      tokenizer.encode_guarded(prompt.text, false, prompt.content_ranges);
  check_ids_in_vocab(tokenizer, ids);
  if (!byte_level(tokenizer) || !all_bytes_round_trip(loaded, prompt.text)) return;
  check(tokenizer.decode(ids, false) == prompt.text, "decode(encode_guarded(p)) != p");
  size_t offset = 0;
  size_t range_index = 0;
  for (const int32_t id : ids) {
    const size_t length = tokenizer.token_bytes(id, true).size();
    if (tokenizer.is_special(id)) {
      while (range_index < prompt.content_ranges.size() &&
             prompt.content_ranges[range_index].end <= offset) {
        ++range_index;
      }
      const bool overlaps = range_index < prompt.content_ranges.size() &&
                            prompt.content_ranges[range_index].begin < offset + length;
      check(!overlaps, "control token inside message content", tokenizer.token_piece(id));
    }
    offset += length;
  }
}

void check_chat(const LoadedTokenizer& loaded, std::string_view text) {
  const std::vector<ChatMessage> messages = messages_from_text(text);
  std::vector<ChatTemplate> templates = {loaded.chat};
  for (const char* name : {"llama2", "llama3", "chatml"}) {
    templates.push_back(std::move(ChatTemplate::from_name(name)).value());
  }
  // The text as a model's template: detection must not crash, and a default system prompt
  // found in it is a plain literal.
  if (auto detected = ChatTemplate::detect(text); detected.is_ok()) {
    const std::string& system = detected->default_system_prompt();
    check(system.find("<|im_end|>") == std::string::npos &&
              system.find_first_of("'\"{}+") == std::string::npos,
          "default system prompt taken from template syntax", system);
    templates.push_back(std::move(detected).value());
  } else {
    check(!detected.status().message().empty(), "detect error without a message");
  }
  for (const ChatTemplate& chat : templates) {
    for (const bool add_generation_prompt : {false, true}) {
      auto rendered = chat.render(messages, add_generation_prompt);
      if (!rendered.is_ok()) {
        check(!rendered.status().message().empty(), "chat error without a message");
        continue;
      }
      check_prompt_ranges(*rendered, messages);
      // The prompt without the generation suffix is a prefix of this one: encode one of them.
      if (add_generation_prompt) check_guarded(loaded, *rendered);
    }
  }
}

}  // namespace
}  // namespace llamaserve

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace llamaserve;
  if (size == 0) return 0;
  const auto& all = tokenizers();
  const LoadedTokenizer& loaded = all[data[0] % all.size()];
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  check_encode(loaded, text);
  check_arbitrary_ids(loaded.tokenizer, text);
  check_chat(loaded, text);
  return 0;
}
