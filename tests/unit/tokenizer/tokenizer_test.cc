// Tokenizer behaviour on small hand-made vocabularies (test_vocab.h), where every expected
// id follows from the vocabulary by hand.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <thread>

#include "test_vocab.h"

namespace llamaserve {
namespace {

using Ids = std::vector<int32_t>;
using testing_vocab::id_of;

class SpmTokenizer : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = testing_vocab::spm_vocab();
    auto created = Tokenizer::create(data_);
    ASSERT_TRUE(created.is_ok()) << created.status().to_string();
    tok_ = std::make_unique<Tokenizer>(std::move(created).value());
  }
  int32_t id(std::string_view piece) const { return id_of(data_, piece); }
  int32_t byte(int b) const { return 3 + b; }
  Ids encode(std::string_view text, bool add_special = false, bool parse_special = false) const {
    return tok_->encode(text, add_special, parse_special);
  }

  TokenizerData data_;
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(SpmTokenizer, HighestScoringPairMergesFirst) {
  // "▁abc": bc (-5) beats ▁a (-7) and ab (-10); then ▁a; "▁abc" is not a piece.
  EXPECT_EQ(encode("abc"), (Ids{id("▁a"), id("bc")}));
}

TEST_F(SpmTokenizer, EqualScoresMergeLeftmostFirst) {
  // "▁aaa": the two "aa" pairs tie; the left one merges, leaving ▁ + aa + a.
  EXPECT_EQ(encode("aaa"), (Ids{id("▁"), id("aa"), id("a")}));
}

TEST_F(SpmTokenizer, SpacesBecomeMarkersWithDummyPrefix) {
  EXPECT_EQ(encode("hi"), (Ids{id("▁hi")}));
  // "▁▁hi": hi (-11), then ▁hi (-12) beats ▁▁ (-13).
  EXPECT_EQ(encode(" hi"), (Ids{id("▁"), id("▁hi")}));
  EXPECT_EQ(encode("hi hi"), (Ids{id("▁hi"), id("▁hi")}));
  EXPECT_EQ(encode(""), Ids{});
  EXPECT_EQ(encode("", true), Ids{1});
}

TEST_F(SpmTokenizer, ByteFallback) {
  // é is not a piece: its two UTF-8 bytes; 中 is a piece.
  EXPECT_EQ(encode("é"), (Ids{id("▁"), byte(0xC3), byte(0xA9)}));
  EXPECT_EQ(encode("中x"), (Ids{id("▁"), id("中"), id("x")}));
  // Bytes that are not UTF-8 are symbols of their own and fall back too.
  EXPECT_EQ(encode("\xFF"
                   "a"),
            (Ids{id("▁"), byte(0xFF), id("a")}));
}

TEST_F(SpmTokenizer, UnknownWithoutBytePieces) {
  TokenizerData data = data_;
  for (int b = 0; b < 256; ++b) data.token_types[3 + b] = TokenType::kUnused;
  for (int b = 0; b < 256; ++b) data.tokens[3 + b] = "unused" + std::to_string(b);
  auto tok = Tokenizer::create(data);
  ASSERT_TRUE(tok.is_ok());
  // A run of unknown characters is one <unk>.
  EXPECT_EQ(tok->encode("aéé", false, false), (Ids{id("▁a"), 0}));
  EXPECT_EQ(tok->encode("éaé", false, false), (Ids{id("▁"), 0, id("a"), 0}));
}

TEST_F(SpmTokenizer, SpecialTokens) {
  EXPECT_EQ(encode("hi", true), (Ids{1, id("▁hi")}));
  // Each text piece after a special token gets the dummy prefix again.
  EXPECT_EQ(encode("<s>hi</s>hi", false, true), (Ids{1, id("▁hi"), 2, id("▁hi")}));
  const Ids plain = encode("<s>", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0);
  EXPECT_EQ(plain.front(), id("▁"));
  // User-defined tokens are split out even without parse_special.
  EXPECT_EQ(encode("x<|user|>x"), (Ids{id("▁"), id("x"), id("<|user|>"), id("▁"), id("x")}));
  EXPECT_EQ(encode("<unk>", false, true), Ids{0});

  TokenizerData with_eos = data_;
  with_eos.add_eos = true;
  EXPECT_EQ(Tokenizer::create(with_eos)->encode("hi", true, false), (Ids{1, id("▁hi"), 2}));
}

TEST_F(SpmTokenizer, DecodeInvertsEncode) {
  for (std::string_view text : {"abc", " hi", "  a", "é中x", "hi hi ",
                                "\xFF"
                                "a",
                                "a\nb\tc"}) {
    EXPECT_EQ(tok_->decode(encode(text), false), text);
    EXPECT_EQ(tok_->decode(encode(text, true), true), text);
  }
  const Ids ids = {1, id("▁a"), id("bc"), 2};
  EXPECT_EQ(tok_->decode(ids, true), "abc");
  EXPECT_EQ(tok_->decode(ids, false), "<s>abc</s>");
  EXPECT_EQ(tok_->decode(Ids{-5, id("▁a"), 99999}, true), "a");
}

TEST_F(SpmTokenizer, PiecesAndBytes) {
  EXPECT_EQ(tok_->token_piece(id("▁a")), "▁a");
  EXPECT_EQ(tok_->token_piece(-1), "");
  EXPECT_EQ(tok_->token_bytes(id("▁a")), " a");
  EXPECT_EQ(tok_->token_bytes(byte('A')), "A");
  EXPECT_EQ(tok_->token_bytes(byte(0xC3)), "\xC3");
  EXPECT_EQ(tok_->token_bytes(1), "");
  EXPECT_EQ(tok_->token_bytes(1, true), "<s>");
  EXPECT_EQ(tok_->token_bytes(id("<|user|>")), "<|user|>");
  EXPECT_EQ(tok_->token_bytes(1 << 30), "");
  EXPECT_TRUE(tok_->is_special(1));
  EXPECT_FALSE(tok_->is_special(id("▁a")));
  EXPECT_EQ(tok_->n_vocab(), static_cast<int32_t>(data_.tokens.size()));
  EXPECT_EQ(tok_->bos_id(), 1);
  EXPECT_EQ(tok_->eos_id(), 2);
  EXPECT_EQ(tok_->find_token("▁hi"), id("▁hi"));
  EXPECT_EQ(tok_->find_token("nope"), std::nullopt);
  EXPECT_TRUE(tok_->is_end_of_generation(2));
  EXPECT_FALSE(tok_->is_end_of_generation(1));
}

class BpeTokenizer : public ::testing::Test {
 protected:
  void SetUp() override { data_ = testing_vocab::bpe_vocab(); }
  Tokenizer make(std::string pre = "llama3") const {
    TokenizerData data = data_;
    data.pre = std::move(pre);
    auto created = Tokenizer::create(data);
    EXPECT_TRUE(created.is_ok()) << created.status().to_string();
    return std::move(created).value();
  }
  int32_t id(std::string_view piece) const { return id_of(data_, piece); }

  TokenizerData data_;
};

TEST_F(BpeTokenizer, MergesByRank) {
  const Tokenizer tok = make();
  EXPECT_EQ(tok.encode("hello world", false, false), (Ids{id("hello"), id("Ġworld")}));
  // aa merges leftmost first: aa|aa|a, then aa+aa.
  EXPECT_EQ(tok.encode("aaaaa", false, false), (Ids{id("aaaa"), 'a'}));
  const int32_t zhong = id(testing_vocab::byte_char(0xE4) + testing_vocab::byte_char(0xB8) +
                           testing_vocab::byte_char(0xAD));  // 中
  ASSERT_GE(zhong, 0);
  EXPECT_EQ(tok.encode("中中", false, false), (Ids{zhong, zhong}));
  // Bytes without merges stay single-byte tokens (id == byte in this vocabulary).
  EXPECT_EQ(tok.encode("é", false, false), (Ids{0xC3, 0xA9}));
  EXPECT_EQ(tok.encode("\xFF", false, false), Ids{0xFF});
  EXPECT_EQ(tok.encode("", false, false), Ids{});
}

TEST_F(BpeTokenizer, IgnoreMergesOnlyForLlama3) {
  // "xyz" is in the vocabulary but no merge builds it: LLaMA 3 takes whole pieces from the
  // vocabulary first, the other pre-tokenizers only merge.
  data_.tokens.push_back("xyz");
  data_.token_types.push_back(TokenType::kNormal);
  EXPECT_EQ(make("llama3").encode("xyz", false, false), Ids{id("xyz")});
  EXPECT_EQ(make("smollm").encode("xyz", false, false), (Ids{'x', 'y', 'z'}));
  EXPECT_EQ(make("gpt2").encode("xyz", false, false), (Ids{'x', 'y', 'z'}));
}

TEST_F(BpeTokenizer, SpecialTokens) {
  const Tokenizer tok = make();
  EXPECT_EQ(tok.encode("hello", true, false), (Ids{id("<|begin|>"), id("hello")}));
  EXPECT_EQ(tok.encode("<|begin|>hello<|end|>", false, true),
            (Ids{id("<|begin|>"), id("hello"), id("<|end|>")}));
  const Ids plain = tok.encode("<|end|>", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), id("<|end|>")), 0);
  EXPECT_EQ(tok.decode(plain, false), "<|end|>");
  EXPECT_EQ(tok.encode("a<tool>b", false, false), (Ids{'a', id("<tool>"), 'b'}));
}

TEST_F(BpeTokenizer, GuardedRangesStayText) {
  const Tokenizer tok = make();
  const int32_t begin = id("<|begin|>"), end = id("<|end|>");
  //                       0        9         19  23
  const std::string text = "<|begin|>x<|end|>y<|end|><|end|>";
  const auto count = [](const Ids& ids, int32_t token) {
    return std::count(ids.begin(), ids.end(), token);
  };
  EXPECT_EQ(count(tok.encode(text, false, true), end), 3);
  // The range covers the first <|end|>: only the two after it are control tokens.
  const std::vector<TextRange> ranges = {{9, 18}};
  const Ids guarded = tok.encode_guarded(text, false, ranges);
  EXPECT_EQ(guarded.front(), begin);
  EXPECT_EQ(count(guarded, end), 2);
  EXPECT_EQ(tok.decode(guarded, false), text);
  // A special token that starts before a range but reaches into it is not matched either.
  const std::vector<TextRange> tail = {{20, 21}};
  EXPECT_EQ(count(tok.encode_guarded(text, false, tail), end), 2);
  // Ranges past the end or empty are harmless.
  const std::vector<TextRange> odd = {{5, 5}, {100, 200}};
  EXPECT_EQ(tok.encode_guarded(text, false, odd), tok.encode(text, false, true));
}

TEST_F(BpeTokenizer, LongestSpecialTokenWins) {
  data_.tokens.push_back("<|end|>more");
  data_.token_types.push_back(TokenType::kControl);
  const Tokenizer tok = make();
  EXPECT_EQ(tok.encode("<|end|>more<|end|>", false, true), (Ids{id("<|end|>more"), id("<|end|>")}));
}

TEST_F(BpeTokenizer, DecodeAndBytes) {
  const Tokenizer tok = make();
  for (std::string_view text : {"hello world", " 中 é\n", "\xFF\xFE", "aaaaa  b"}) {
    EXPECT_EQ(tok.decode(tok.encode(text, false, false), false), text);
  }
  EXPECT_EQ(tok.token_bytes(' '), " ");
  EXPECT_EQ(tok.token_piece(' '), "Ġ");
  EXPECT_EQ(tok.token_bytes(id("Ġworld")), " world");
  EXPECT_EQ(tok.token_bytes(0xE4), "\xE4");
  EXPECT_EQ(tok.token_bytes(id("<|end|>")), "");
  EXPECT_EQ(tok.token_bytes(id("<|end|>"), true), "<|end|>");
  const Ids ids = {id("<|begin|>"), id("hello"), id("<|end|>")};
  EXPECT_EQ(tok.decode(ids, true), "hello");
  EXPECT_EQ(tok.decode(ids, false), "<|begin|>hello<|end|>");
}

TEST_F(BpeTokenizer, EndOfGeneration) {
  const Tokenizer tok = make();
  EXPECT_TRUE(tok.is_end_of_generation(id("<|end|>")));     // eos
  EXPECT_TRUE(tok.is_end_of_generation(id("<|eot_id|>")));  // by text
  EXPECT_FALSE(tok.is_end_of_generation(id("<|begin|>")));
  EXPECT_FALSE(tok.is_end_of_generation(id("hello")));
  EXPECT_FALSE(tok.is_end_of_generation(-1));
}

TEST_F(BpeTokenizer, ConcurrentEncodeIsSafe) {
  const Tokenizer tok = make();
  const std::string text = "hello world 中 aaaaa <|end|> hello";
  const Ids expected = tok.encode(text, true, true);
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) mismatches += tok.encode(text, true, true) != expected;
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(TokenizerCreate, RejectsInconsistentData) {
  const auto code_of = [](TokenizerData data) {
    return Tokenizer::create(std::move(data)).status().code();
  };
  TokenizerData data = testing_vocab::spm_vocab();
  EXPECT_EQ(code_of(data), StatusCode::kOk);

  TokenizerData bad = data;
  bad.model = "bert";
  EXPECT_EQ(code_of(bad), StatusCode::kUnsupported);
  bad = data;
  bad.tokens.clear();
  bad.scores.clear();
  bad.token_types.clear();
  EXPECT_EQ(code_of(bad), StatusCode::kInvalidArgument);
  bad = data;
  bad.scores.pop_back();
  EXPECT_EQ(code_of(bad), StatusCode::kInvalidArgument);
  bad = data;
  bad.token_types.back() = static_cast<TokenType>(42);
  EXPECT_EQ(code_of(bad), StatusCode::kInvalidArgument);
  bad = data;
  bad.eos_id = static_cast<int32_t>(data.tokens.size());
  EXPECT_EQ(code_of(bad), StatusCode::kInvalidArgument);
  bad = data;
  bad.bos_id.reset();
  EXPECT_EQ(code_of(bad), StatusCode::kInvalidArgument);  // add_bos without a bos id

  TokenizerData bpe = testing_vocab::bpe_vocab();
  EXPECT_EQ(code_of(bpe), StatusCode::kOk);
  bad = bpe;
  bad.pre = "no-such-pre";
  EXPECT_EQ(code_of(bad), StatusCode::kUnsupported);
  bad = bpe;
  bad.merges.push_back("nospace");
  EXPECT_EQ(code_of(bad), StatusCode::kInvalidArgument);
  // A merge naming tokens the vocabulary lacks is skipped, not fatal.
  bad = bpe;
  bad.merges.push_back("zz qq");
  EXPECT_EQ(code_of(bad), StatusCode::kOk);
}

}  // namespace
}  // namespace llamaserve
