#include "tokenizer/stream_decoder.h"

#include <gtest/gtest.h>

#include <random>

#include "test_vocab.h"
#include "tokenizer/unicode.h"

namespace llamaserve {
namespace {

Tokenizer bpe() { return Tokenizer::create(testing_vocab::bpe_vocab()).value(); }

// Feeds tokens one at a time and records each push's output.
std::vector<std::string> feed(StreamDecoder& decoder, const std::vector<int32_t>& tokens) {
  std::vector<std::string> out;
  for (int32_t token : tokens) out.push_back(decoder.push(token));
  return out;
}

using Outputs = std::vector<std::string>;

TEST(StreamDecoder, CjkSplitAcrossByteTokens) {
  StreamDecoder decoder(bpe());
  // 中 = E4 B8 AD, 文 = E6 96 87; in this vocabulary byte b is token b.
  EXPECT_EQ(feed(decoder, {0xE4, 0xB8, 0xAD, 0xE6, 0x96, 0x87}),
            (Outputs{"", "", "中", "", "", "文"}));
  EXPECT_EQ(decoder.flush(), "");
}

TEST(StreamDecoder, EmojiSplitAcrossTokens) {
  StreamDecoder decoder(bpe());
  // 🦙 = F0 9F A6 99, preceded by "a" and followed by "b" in the same tokens' neighbours.
  EXPECT_EQ(feed(decoder, {'a', 0xF0, 0x9F, 0xA6, 0x99, 'b'}),
            (Outputs{"a", "", "", "", "🦙", "b"}));
}

TEST(StreamDecoder, MultiByteTokenEndingMidCharacter) {
  const TokenizerData data = testing_vocab::bpe_vocab();
  StreamDecoder decoder(Tokenizer::create(data).value());
  const int32_t e4b8 =
      testing_vocab::id_of(data, testing_vocab::byte_char(0xE4) + testing_vocab::byte_char(0xB8));
  ASSERT_GE(e4b8, 0);
  // "x" + E4 B8 in one token: "x" comes out now, the rest waits for AD.
  EXPECT_EQ(decoder.push('x'), "x");
  EXPECT_EQ(decoder.push(e4b8), "");
  EXPECT_EQ(decoder.push(0xAD), "中");
}

TEST(StreamDecoder, InvalidBytesBecomeReplacementCharacters) {
  StreamDecoder decoder(bpe());
  EXPECT_EQ(decoder.push(0xFF), "\uFFFD");  // can never start a character: replaced at once
  EXPECT_EQ(decoder.push(0xE4), "");
  EXPECT_EQ(decoder.push('a'),
            "\uFFFD"
            "a");  // E4 followed by 'a' is proven broken
  EXPECT_EQ(decoder.push(0xF0), "");
  EXPECT_EQ(decoder.push(0x9F), "");
  EXPECT_EQ(decoder.flush(), "\uFFFD");  // unfinished at the end
  EXPECT_EQ(decoder.flush(), "");
  EXPECT_EQ(decoder.push('z'), "z");  // reusable after flush
}

TEST(StreamDecoder, SpecialTokensOnlyWhenAsked) {
  const TokenizerData data = testing_vocab::bpe_vocab();
  const Tokenizer tok = Tokenizer::create(data).value();
  const int32_t end = testing_vocab::id_of(data, "<|end|>");
  StreamDecoder skipping(tok);
  EXPECT_EQ(skipping.push(end), "");
  StreamDecoder rendering(tok, /*skip_special=*/false);
  EXPECT_EQ(rendering.push(end), "<|end|>");
}

TEST(StreamDecoder, SentencePieceKeepsLeadingSpace) {
  const TokenizerData data = testing_vocab::spm_vocab();
  const Tokenizer tok = Tokenizer::create(data).value();
  StreamDecoder decoder(tok);
  const int32_t a = testing_vocab::id_of(data, "▁a");
  // A continuation keeps its space; 🦙 arrives as four byte-fallback pieces.
  EXPECT_EQ(feed(decoder, {a, 3 + 0xF0, 3 + 0x9F, 3 + 0xA6, 3 + 0x99, 1}),
            (Outputs{" a", "", "", "", "🦙", ""}));
}

TEST(StreamDecoder, RandomStreamsMatchSanitizedDecode) {
  // Whatever the tokens, the pushed pieces plus flush are valid UTF-8 and equal the whole
  // decoded byte string with ill-formed parts replaced.
  const Tokenizer tok = bpe();
  std::mt19937 rng(5);
  const std::vector<int32_t> interesting = {0xE4, 0xB8, 0xAD, 0xF0, 0x9F, 0xA6, 0x99, 0xC3,
                                            0xA9, 0x80, 0xFF, 'a',  ' ',  0xED, 0xA0, 0xF4};
  for (int round = 0; round < 500; ++round) {
    std::vector<int32_t> tokens;
    const int n = std::uniform_int_distribution<int>(1, 12)(rng);
    for (int i = 0; i < n; ++i) {
      tokens.push_back(rng() % 4 == 0 ? static_cast<int32_t>(rng() % tok.n_vocab())
                                      : interesting[rng() % interesting.size()]);
    }
    StreamDecoder decoder(tok);
    std::string streamed;
    for (int32_t token : tokens) {
      const std::string piece = decoder.push(token);
      EXPECT_EQ(unicode::sanitize_utf8(piece), piece) << "push emitted ill-formed UTF-8";
      streamed += piece;
    }
    streamed += decoder.flush();
    EXPECT_EQ(streamed, unicode::sanitize_utf8(tok.decode(tokens, true)));
  }
}

}  // namespace
}  // namespace llamaserve
