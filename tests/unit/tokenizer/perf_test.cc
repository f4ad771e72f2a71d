// Guards against quadratic behaviour: a 100k-token prompt and single pre-tokenized pieces of
// hundreds of kilobytes must encode in well under the limits below (a quadratic merge loop
// takes minutes on these inputs; the heap-based one takes milliseconds).
#include <gtest/gtest.h>

#include <chrono>

#include "corpus.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace llamaserve {
namespace {

const std::string kFixtures = LLAMASERVE_FIXTURES_DIR;
constexpr double kLimitSeconds = 20;  // generous for sanitizer builds on a shared 2-core CI box

Tokenizer load(const std::string& name) {
  auto file = GgufFile::open(kFixtures + "/" + name);
  EXPECT_TRUE(file.is_ok()) << file.status().to_string();
  return Tokenizer::from_gguf(**file).value();
}

template <typename F>
double seconds(F&& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string long_prompt() {
  std::string text;
  for (const std::string& s : testing_corpus::make_corpus(6000, 3)) text += s + "\n";
  return text;
}

TEST(TokenizerPerf, HundredThousandTokenPrompt) {
  const std::string text = long_prompt();
  for (const char* name : {"vocab-llama3-bpe.gguf", "vocab-llama2-spm.gguf"}) {
    const Tokenizer tok = load(name);
    std::vector<int32_t> ids;
    const double s = seconds([&] { ids = tok.encode(text, true, true); });
    EXPECT_GT(ids.size(), 100000u) << name;
    EXPECT_LT(s, kLimitSeconds) << name;
    EXPECT_EQ(tok.decode(ids, true), text) << name;
  }
}

TEST(TokenizerPerf, HugeSinglePieces) {
  // One letter run (a single pre-tokenizer piece for byte-level BPE, one long symbol chain for
  // SentencePiece), and a run of a character every merge candidate ties on.
  const std::string letters = [] {
    std::string s;
    for (int i = 0; i < 300000; ++i) s.push_back(static_cast<char>('a' + (i * 7 + i / 13) % 26));
    return s;
  }();
  const std::string same(300000, 'a');
  for (const char* name : {"vocab-llama3-bpe.gguf", "vocab-llama2-spm.gguf"}) {
    const Tokenizer tok = load(name);
    for (const std::string* text : {&letters, &same}) {
      std::vector<int32_t> ids;
      const double s = seconds([&] { ids = tok.encode(*text, false, false); });
      EXPECT_LT(s, kLimitSeconds) << name;
      EXPECT_EQ(tok.decode(ids, true), *text) << name;
    }
  }
}

}  // namespace
}  // namespace llamaserve
