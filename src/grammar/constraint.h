// Constraint: a compiled grammar for one vocabulary, shared by every request that uses the
// same response format, with the token masks it has computed (keyed by matcher state, so a
// state reached again, by this request or another, costs one lookup).
//
// ConstraintState: one sequence's place in a Constraint. The sampler masks the logits with
// it before any other step and advances it with each sampled token.
//
// ConstraintCache: a model's compiled response formats by their text, least recently used
// evicted, and the model's vocabulary trie, built on first use. Memory: at most max_entries
// constraints, each with at most 8 MiB of cached masks (500 masks of a 128k vocabulary).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>

#include "core/status.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/schema_compiler.h"
#include "grammar/token_vocabulary.h"
#include "tokenizer/tokenizer.h"

namespace llamaserve::grammar {

class Constraint {
 public:
  Constraint(Grammar grammar, std::shared_ptr<const TokenVocabulary> vocabulary,
             size_t mask_cache_bytes = size_t{8} << 20);

  const Grammar& grammar() const { return grammar_; }
  const TokenVocabulary& vocabulary() const { return *vocabulary_; }

  // The tokens `matcher` (of this grammar) allows now. Thread-safe.
  std::shared_ptr<const TokenMask> allowed_tokens(Matcher& matcher) const;

  struct CacheStats {
    uint64_t hits = 0;
    uint64_t misses = 0;
  };
  CacheStats cache_stats() const;

 private:
  Grammar grammar_;
  std::shared_ptr<const TokenVocabulary> vocabulary_;
  size_t mask_cache_bytes_;
  std::shared_ptr<const TokenMask> end_only_;  // after the end token

  mutable std::mutex mutex_;
  // When the masks reach mask_cache_bytes_ the cache starts over: a bound, not a policy.
  mutable std::unordered_map<std::string, std::shared_ptr<const TokenMask>> masks_;
  mutable size_t cached_bytes_ = 0;
  mutable CacheStats stats_;
};

class ConstraintState {
 public:
  explicit ConstraintState(std::shared_ptr<const Constraint> constraint);

  // Sets the logit of every token the grammar does not allow now to -infinity.
  void apply(std::span<float> logits);
  // The tokens allowed now.
  std::shared_ptr<const TokenMask> allowed_tokens();
  // Advances over a sampled token. A token the grammar does not allow (possible only when
  // the mask was bypassed) leaves the state dead: from then on only end tokens are allowed.
  void accept(int32_t token);
  bool is_complete() const { return matcher_.is_complete(); }

 private:
  std::shared_ptr<const Constraint> constraint_;
  Matcher matcher_;
  bool ended_ = false;  // an end-of-generation token was accepted
};

enum class FormatKind { kJsonObject, kJsonSchema };

class ConstraintCache {
 public:
  ConstraintCache(std::shared_ptr<const Tokenizer> tokenizer, size_t max_entries = 64,
                  CompileOptions options = {});

  // The constraint for a response format: kJsonObject (schema unused) or the JSON Schema in
  // `schema` (its text, compact or not, is the cache key). Compile errors are kUnsupported or
  // kInvalidArgument naming the feature.
  Result<std::shared_ptr<const Constraint>> get(FormatKind kind,
                                                const nlohmann::ordered_json& schema);

  std::shared_ptr<const TokenVocabulary> vocabulary();

 private:
  std::shared_ptr<const Tokenizer> tokenizer_;
  size_t max_entries_;
  CompileOptions options_;
  std::once_flag vocabulary_once_;
  std::shared_ptr<const TokenVocabulary> vocabulary_;

  std::mutex mutex_;
  std::list<std::string> recent_;  // most recent first
  struct Entry {
    std::shared_ptr<const Constraint> constraint;
    std::list<std::string>::iterator position;
  };
  std::unordered_map<std::string, Entry> entries_;
};

}  // namespace llamaserve::grammar
