#include "toolcall/call_stream.h"

#include <gtest/gtest.h>

namespace llamaserve::toolcall {
namespace {

// Feeds the text in pieces of `piece` bytes; returns what was sent and the final result.
struct Streamed {
  std::string sent;
  ParsedOutput rest;
};
Streamed stream(std::string_view text, Syntax syntax, size_t piece) {
  CallStream calls(syntax);
  Streamed out;
  for (size_t i = 0; i < text.size(); i += piece) out.sent += calls.feed(text.substr(i, piece));
  out.rest = calls.finish();
  return out;
}

TEST(CallStream, PlainTextFlowsThrough) {
  CallStream calls(Syntax::kHermes);
  EXPECT_EQ(calls.feed("Hello"), "Hello");
  EXPECT_EQ(calls.feed(" world"), " world");
  const ParsedOutput rest = calls.finish();
  EXPECT_EQ(rest.content, "");
  EXPECT_TRUE(rest.calls.empty());
}

TEST(CallStream, PartialMarkerIsHeldUntilItIsKnown) {
  CallStream calls(Syntax::kHermes);
  EXPECT_EQ(calls.feed("a <tool"), "a ");
  EXPECT_EQ(calls.feed("box> b"), "<toolbox> b");
  EXPECT_EQ(calls.finish().content, "");
}

TEST(CallStream, TextThenCallAtEveryPieceSize) {
  const std::string text =
      "Checking.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>";
  for (size_t piece = 1; piece <= text.size(); ++piece) {
    const Streamed out = stream(text, Syntax::kHermes, piece);
    EXPECT_EQ(out.sent, "Checking.\n") << piece;
    ASSERT_EQ(out.rest.calls.size(), 1u) << piece;
    EXPECT_EQ(out.rest.calls[0].name, "f");
    EXPECT_EQ(out.rest.content, "");
  }
}

TEST(CallStream, LeadingJsonIsHeldAndDecidedAtTheEnd) {
  // A call without a marker (LLaMA 3.2): nothing is sent.
  Streamed out = stream("\n {\"name\": \"f\", \"parameters\": {}}", Syntax::kLlama3, 3);
  EXPECT_EQ(out.sent, "");
  ASSERT_EQ(out.rest.calls.size(), 1u);
  // JSON that is not a call is sent whole at the end, white space included.
  out = stream("\n {\"answer\": 42}", Syntax::kLlama3, 3);
  EXPECT_EQ(out.sent, "");
  EXPECT_TRUE(out.rest.calls.empty());
  EXPECT_EQ(out.rest.content, "\n {\"answer\": 42}");
}

TEST(CallStream, FamilyMarkers) {
  Streamed out = stream("<|python_tag|>{\"name\": \"f\", \"parameters\": {}}", Syntax::kLlama3, 4);
  EXPECT_EQ(out.sent, "");
  EXPECT_EQ(out.rest.calls.size(), 1u);
  out = stream("ok [TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]", Syntax::kMistral, 2);
  EXPECT_EQ(out.sent, "ok ");
  EXPECT_EQ(out.rest.calls.size(), 1u);
  out = stream(
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{}\n```"
      "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
      Syntax::kDeepSeek, 5);
  EXPECT_EQ(out.sent, "");
  EXPECT_EQ(out.rest.calls.size(), 1u);
}

TEST(CallStream, BrokenCallIsReturnedAsContent) {
  const std::string text = "Sure: <tool_call>{\"name\": \"f\", \"argu";
  const Streamed out = stream(text, Syntax::kHermes, 4);
  EXPECT_EQ(out.sent, "Sure: ");
  EXPECT_TRUE(out.rest.calls.empty());
  EXPECT_EQ(out.sent + out.rest.content, text);
}

TEST(CallStream, NothingIsLostWhateverThePieces) {
  const char* texts[] = {"plain answer", "a <tool_c",     "<tool_call>junk",   "[link](x) and more",
                         "  ",           "<|python_tag|", "{\"a\":1} trailing"};
  for (const char* text : texts) {
    for (Syntax syntax : {Syntax::kHermes, Syntax::kLlama3, Syntax::kMistral, Syntax::kDeepSeek}) {
      for (size_t piece = 1; piece <= 4; ++piece) {
        const Streamed out = stream(text, syntax, piece);
        if (out.rest.calls.empty()) {
          EXPECT_EQ(out.sent + out.rest.content, text) << text;
        }
      }
    }
  }
}

}  // namespace
}  // namespace llamaserve::toolcall
