// The hand-written tokenizer.model reader: the real LLaMA 2 model against the vocabulary GGUF
// made from it, hand-encoded messages for the protobuf corners, and broken inputs.
#include <gtest/gtest.h>

#include <random>

#include "gguf/gguf.h"
#include "model/importers/hf_tokenizer.h"
#include "model/importers/sentencepiece_model.h"
#include "tokenizer/tokenizer_data.h"
#include "tools_test_util.h"

namespace llamaserve {
namespace {

using namespace tools_test;

// Protobuf encoding helpers.
void put_varint(std::vector<uint8_t>& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<uint8_t>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<uint8_t>(v));
}
void put_key(std::vector<uint8_t>& out, uint32_t field, uint32_t wire) {
  put_varint(out, (field << 3) | wire);
}
void put_bytes(std::vector<uint8_t>& out, uint32_t field, const std::vector<uint8_t>& bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out.insert(out.end(), bytes.begin(), bytes.end());
}
std::vector<uint8_t> piece(const std::string& text, float score, int type) {
  std::vector<uint8_t> out;
  put_bytes(out, 1, std::vector<uint8_t>(text.begin(), text.end()));
  put_key(out, 2, 5);
  uint32_t bits;
  std::memcpy(&bits, &score, 4);
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(bits >> (8 * i)));
  if (type != 0) {
    put_key(out, 3, 0);
    put_varint(out, static_cast<uint64_t>(type));
  }
  return out;
}

TEST(SentencePieceModelTest, Llama2ModelMatchesItsVocabularyGguf) {
  auto model = read_sentencepiece_model((kFixtures / "llama2-tokenizer.model").string());
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  EXPECT_EQ(model->model_type, 2);  // BPE
  EXPECT_TRUE(model->byte_fallback);
  EXPECT_EQ(model->unk_id, 0);
  EXPECT_EQ(model->bos_id, 1);
  EXPECT_EQ(model->eos_id, 2);
  EXPECT_EQ(model->pad_id, -1);  // a negative int32, sign-extended on the wire
  EXPECT_TRUE(model->add_dummy_prefix);

  auto data = tokenizer_from_sentencepiece(*model);
  ASSERT_TRUE(data.is_ok()) << data.status().to_string();
  auto gguf = GgufFile::open((kFixtures / "vocab-llama2-spm.gguf").string());
  ASSERT_TRUE(gguf.is_ok());
  auto expected = tokenizer_data_from_gguf(**gguf);
  ASSERT_TRUE(expected.is_ok()) << expected.status().to_string();
  EXPECT_EQ(data->model, "llama");
  EXPECT_EQ(data->tokens, expected->tokens);
  EXPECT_EQ(data->scores, expected->scores);
  EXPECT_EQ(data->token_types, expected->token_types);
  EXPECT_EQ(data->bos_id, expected->bos_id);
  EXPECT_EQ(data->eos_id, expected->eos_id);
  EXPECT_EQ(data->unk_id, expected->unk_id);
  EXPECT_FALSE(data->pad_id.has_value());
  EXPECT_EQ(data->add_bos, expected->add_bos);
  EXPECT_EQ(data->add_eos, expected->add_eos);
  EXPECT_EQ(data->add_space_prefix, expected->add_space_prefix);
}

TEST(SentencePieceModelTest, HandEncodedMessage) {
  std::vector<uint8_t> proto;
  put_bytes(proto, 1, piece("<unk>", 0.0f, 2));
  put_bytes(proto, 1, piece("a", -1.5f, 0));  // no type: NORMAL
  put_bytes(proto, 1, piece("<0x41>", 0.0f, 6));
  // An unknown field of each wire type before the trainer spec must be skipped.
  put_key(proto, 99, 0);
  put_varint(proto, 12345);
  put_key(proto, 98, 1);
  proto.insert(proto.end(), 8, 0);
  put_key(proto, 97, 5);
  proto.insert(proto.end(), 4, 0);
  std::vector<uint8_t> trainer;
  put_key(trainer, 3, 0);
  put_varint(trainer, 2);
  put_key(trainer, 41, 0);
  put_varint(trainer, static_cast<uint64_t>(int64_t{-1}));  // no BOS
  put_key(trainer, 43, 0);
  put_varint(trainer, 1);
  put_bytes(proto, 2, trainer);
  std::vector<uint8_t> normalizer;
  put_key(normalizer, 3, 0);
  put_varint(normalizer, 0);
  put_bytes(proto, 3, normalizer);

  auto model = parse_sentencepiece_model(proto.data(), proto.size());
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  EXPECT_EQ(model->pieces, (std::vector<std::string>{"<unk>", "a", "<0x41>"}));
  EXPECT_EQ(model->scores, (std::vector<float>{0.0f, -1.5f, 0.0f}));
  EXPECT_EQ(model->types, (std::vector<int32_t>{2, 1, 6}));
  EXPECT_EQ(model->bos_id, -1);
  EXPECT_EQ(model->pad_id, 1);
  EXPECT_FALSE(model->add_dummy_prefix);
  auto data = tokenizer_from_sentencepiece(*model);
  ASSERT_TRUE(data.is_ok());
  EXPECT_FALSE(data->bos_id.has_value());
  EXPECT_FALSE(data->add_bos);
  EXPECT_EQ(data->pad_id, 1);
  EXPECT_FALSE(data->add_space_prefix);

  // Every truncation of the message is refused or parses to a prefix; none reads past it.
  for (size_t n = 0; n < proto.size(); ++n) {
    std::vector<uint8_t> cut(proto.begin(), proto.begin() + static_cast<ptrdiff_t>(n));
    auto partial = parse_sentencepiece_model(cut.data(), cut.size());
    if (partial.is_ok()) {
      EXPECT_LE(partial->pieces.size(), 3u);
    }
  }
}

// Random byte flips in the real model: a clean parse or an error, never a crash or a read
// past the buffer (the sanitizer builds check the latter).
TEST(SentencePieceModelTest, CorruptedModelsNeverCrash) {
  const std::vector<uint8_t> model = read_bytes(kFixtures / "llama2-tokenizer.model");
  ASSERT_FALSE(model.empty());
  std::mt19937 rng(99);
  int refused = 0;
  for (int iteration = 0; iteration < 100; ++iteration) {
    // A copy of exactly the (possibly cut) size, so any overread leaves the allocation.
    std::vector<uint8_t> bytes(
        model.begin(),
        model.begin() + static_cast<ptrdiff_t>(rng() % 2 ? model.size() : rng() % model.size()));
    for (int f = 0; f < 8 && !bytes.empty(); ++f)
      bytes[rng() % bytes.size()] = static_cast<uint8_t>(rng());
    auto parsed = parse_sentencepiece_model(bytes.data(), bytes.size());
    refused += parsed.is_ok() ? 0 : 1;
  }
  EXPECT_GT(refused, 0);
}

TEST(SentencePieceModelTest, RefusesBrokenAndUnsupportedModels) {
  const std::vector<uint8_t> empty;
  auto none = parse_sentencepiece_model(empty.data(), 0);
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("no pieces"), std::string::npos);

  std::vector<uint8_t> bad_length;
  put_key(bad_length, 1, 2);
  put_varint(bad_length, 1000);
  bad_length.push_back('x');
  auto past_end = parse_sentencepiece_model(bad_length.data(), bad_length.size());
  ASSERT_FALSE(past_end.is_ok());
  EXPECT_NE(past_end.status().message().find("runs past the end"), std::string::npos);

  std::vector<uint8_t> group = {0x0b};  // field 1, wire type 3 (start group)
  EXPECT_FALSE(parse_sentencepiece_model(group.data(), group.size()).is_ok());

  std::vector<uint8_t> long_varint(12, 0xff);
  EXPECT_FALSE(parse_sentencepiece_model(long_varint.data(), long_varint.size()).is_ok());

  std::vector<uint8_t> bad_type;
  put_bytes(bad_type, 1, piece("x", 0.0f, 9));
  auto type9 = parse_sentencepiece_model(bad_type.data(), bad_type.size());
  ASSERT_FALSE(type9.is_ok());
  EXPECT_NE(type9.status().message().find("piece type 9"), std::string::npos);

  // A Unigram model (the default model_type) parses but is not converted.
  std::vector<uint8_t> unigram;
  put_bytes(unigram, 1, piece("x", 0.0f, 1));
  auto model = parse_sentencepiece_model(unigram.data(), unigram.size());
  ASSERT_TRUE(model.is_ok());
  auto data = tokenizer_from_sentencepiece(*model);
  ASSERT_FALSE(data.is_ok());
  EXPECT_NE(data.status().message().find("only BPE"), std::string::npos);

  TempDir dir;
  auto missing = read_sentencepiece_model(dir.file("nope.model"));
  EXPECT_FALSE(missing.is_ok());
}

}  // namespace
}  // namespace llamaserve
