// A varied test corpus generated from a fixed seed: several scripts, CJK, emoji, whitespace
// runs, control and byte-fallback characters, code, numbers, contractions and long repeats.
// All strings are well-formed UTF-8.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tokenizer/unicode.h"

namespace llamaserve::testing_corpus {

inline std::vector<std::string> make_corpus(size_t size, uint32_t seed) {
  std::mt19937 rng(seed);
  const auto pick = [&](const auto& pool) { return pool[rng() % std::size(pool)]; };
  const auto uniform = [&](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };

  static const char* const kWords[] = {
      "the",  "The",  "quick", "fox",   "Hello",  "world", "LLaMA",     "naïve", "café",   "Straße",
      "it's", "IT'S", "we'll", "don't", "O'Neil", "e.g.",  "tokenizer", "GPU",   "ünïcödé"};
  static const std::pair<uint32_t, uint32_t> kScripts[] = {
      {0x00C0, 0x00FF}, {0x0100, 0x017F}, {0x0391, 0x03C9}, {0x0410, 0x044F}, {0x05D0, 0x05EA},
      {0x0627, 0x064A}, {0x0905, 0x094C}, {0x0E01, 0x0E3A}, {0x4E00, 0x9FFF}, {0x3041, 0x3096},
      {0x30A1, 0x30FA}, {0xAC00, 0xD7A3}, {0x0300, 0x036F}};
  static const char* const kEmoji[] = {
      "🦙", "😀", "🎉", "👍🏽", "👨‍👩‍👧", "🇯🇵", "❤️", "🧑‍💻"};
  static const char* const kSpace[] = {" ",      "  ",   "   ",       "\t",     "\n",
                                       "\n\n",   "\r\n", " \n ",      "\u00a0", "\u3000",
                                       "\u2009", "\x0b", "    \n\t  "};
  static const char* const kRare[] = {"\x01",       "\x07",   "\x1b",       "\x1f",
                                      "\x7f",       "\ue000", "\U00010000", "\U0001d400",
                                      "\U00020000", "\u2603", "\ufffd",     "\u00ad"};
  static const char* const kCode[] = {
      "def f(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) {}",
      "{\"key\": [1, 2.5, null]}",     "x = [i**2 for i in range(10)]",
      "#include <vector>\n",           "if (a && b || !c) {\n\treturn;\n}"};
  static const char* const kNumbers[] = {"0",         "42",  "1234",       "3.14159",
                                         "1,234,567", "٣٤٥", "１２３",     "²³",
                                         "Ⅻ",         "½",   "2024-06-11", "12345678901234567890"};
  static const char* const kRepeat[] = {"a", "=", ".", "-", "0", "ha", " ", "ー", "日", "é"};
  static const char* const kSeparators[] = {"", " ", " ", "  ", "\n", "\t"};

  std::vector<std::string> corpus = {"", " ", "a", " a", "a ", "  leading", "\t\ttabs", "🦙"};
  while (corpus.size() < size) {
    std::string text;
    const int parts = uniform(1, 8);
    for (int p = 0; p < parts; ++p) {
      text += pick(kSeparators);
      switch (uniform(0, 8)) {
        case 0:
          for (int w = uniform(1, 5); w > 0; --w) text += std::string(pick(kWords)) + " ";
          break;
        case 1: {
          const auto [lo, hi] = pick(kScripts);
          for (int c = uniform(1, 8); c > 0; --c) unicode::append_utf8(text, uniform(lo, hi));
          break;
        }
        case 2: text += pick(kEmoji); break;
        case 3: text += pick(kSpace); break;
        case 4: text += pick(kRare); break;
        case 5: text += pick(kCode); break;
        case 6: text += pick(kNumbers); break;
        case 7:
          for (int r = uniform(2, 30); r > 0; --r) text += pick(kRepeat);
          break;
        default:
          for (int c = uniform(1, 12); c > 0; --c)
            text.push_back(static_cast<char>(uniform(0x20, 0x7E)));
      }
    }
    corpus.push_back(std::move(text));
  }
  return corpus;
}

}  // namespace llamaserve::testing_corpus
