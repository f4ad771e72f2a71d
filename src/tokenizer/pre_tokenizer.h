// Pre-tokenizers of byte-level BPE vocabularies: they cut text into the pieces that BPE
// merges within. Each kind reproduces one of the regexes the reference tokenizers use,
// written out by hand over code point classes (unicode.h) instead of a regex engine:
//
//   kGpt2   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   kLlama3 (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//           ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   kQwen2  as kLlama3 with \p{N} (one digit per piece) instead of \p{N}{1,3}
//   kSmollm every \p{N} code point alone first, then kGpt2 within the rest
//
// Matching is leftmost-first like the regex engines: at each position the first alternative
// that matches wins, and quantifiers are greedy with backtracking where the regex has it
// (\s+(?!\S) leaves the last space of a run for the next word). Bytes that are not valid
// UTF-8 count as one "other" code point each, so no input is rejected or lost.
#pragma once

#include <string_view>
#include <vector>

#include "core/status.h"

namespace llamaserve {

enum class PreTokenizerKind { kGpt2, kLlama3, kQwen2, kSmollm };

// Maps tokenizer.ggml.pre to a kind; kUnsupported names the known values otherwise.
Result<PreTokenizerKind> pre_tokenizer_from_name(std::string_view name);

// Appends the pieces of `text` to `pieces`: views into `text`, in order, non-empty, covering
// it exactly. Linear in the length of the text.
void pre_tokenize(PreTokenizerKind kind, std::string_view text,
                  std::vector<std::string_view>& pieces);

}  // namespace llamaserve
