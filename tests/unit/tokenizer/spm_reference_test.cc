// Our SentencePiece-style tokenizer (vocab-llama2-spm.gguf) against the SentencePiece
// library itself (Debian's libsentencepiece) with the original llama2-tokenizer.model, on a
// generated corpus: same ids, same decoded text, and decode(encode(s)) == s.
#include <gtest/gtest.h>

#include <sentencepiece_processor.h>

#include "corpus.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace llamaserve {
namespace {

const std::string kFixtures = LLAMASERVE_FIXTURES_DIR;

TEST(SentencePieceReference, Llama2CorpusMatches) {
  sentencepiece::SentencePieceProcessor sp;
  const auto loaded = sp.Load(kFixtures + "/llama2-tokenizer.model");
  ASSERT_TRUE(loaded.ok()) << loaded.ToString();
  auto file = GgufFile::open(kFixtures + "/vocab-llama2-spm.gguf");
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  auto tok = Tokenizer::from_gguf(**file);
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();

  int mismatches = 0;
  for (const std::string& text : testing_corpus::make_corpus(2000, 77)) {
    std::vector<int> expected;
    ASSERT_TRUE(sp.Encode(text, &expected).ok());
    const std::vector<int32_t> ids = tok->encode(text, false, false);
    if (std::vector<int>(ids.begin(), ids.end()) != expected && ++mismatches <= 5) {
      ADD_FAILURE() << "ids differ for " << ::testing::PrintToString(text) << "\n  ours "
                    << ::testing::PrintToString(ids) << "\n  ref  "
                    << ::testing::PrintToString(expected);
    }
    std::string reference_text;
    ASSERT_TRUE(sp.Decode(expected, &reference_text).ok());
    EXPECT_EQ(tok->decode(ids, true), reference_text);
    EXPECT_EQ(tok->decode(ids, true), text);
  }
  EXPECT_EQ(mismatches, 0);
}

}  // namespace
}  // namespace llamaserve
