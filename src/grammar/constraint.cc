#include "grammar/constraint.h"

namespace llamaserve::grammar {

Constraint::Constraint(Grammar grammar, std::shared_ptr<const TokenVocabulary> vocabulary,
                       size_t mask_cache_bytes)
    : grammar_(std::move(grammar)),
      vocabulary_(std::move(vocabulary)),
      mask_cache_bytes_(mask_cache_bytes) {
  auto end_only = std::make_shared<TokenMask>();
  end_only->reset(vocabulary_->n_vocab());
  for (int32_t id : vocabulary_->end_tokens()) end_only->allow(id);
  end_only_ = std::move(end_only);
}

std::shared_ptr<const TokenMask> Constraint::allowed_tokens(Matcher& matcher) const {
  if (matcher.is_dead()) return end_only_;
  std::string key = matcher.state_key();
  {
    std::lock_guard lock(mutex_);
    if (auto it = masks_.find(key); it != masks_.end()) {
      ++stats_.hits;
      return it->second;
    }
    ++stats_.misses;
  }
  auto mask = std::make_shared<TokenMask>();
  matcher.allowed_tokens(*vocabulary_, *mask);
  const size_t bytes = mask->words.size() * sizeof(uint64_t) + key.size();
  std::lock_guard lock(mutex_);
  if (cached_bytes_ + bytes > mask_cache_bytes_) {
    masks_.clear();
    cached_bytes_ = 0;
  }
  if (masks_.emplace(std::move(key), mask).second) cached_bytes_ += bytes;
  return mask;
}

Constraint::CacheStats Constraint::cache_stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

ConstraintState::ConstraintState(std::shared_ptr<const Constraint> constraint)
    : constraint_(std::move(constraint)), matcher_(constraint_->grammar()) {}

std::shared_ptr<const TokenMask> ConstraintState::allowed_tokens() {
  if (ended_) {
    auto mask = std::make_shared<TokenMask>();
    mask->reset(constraint_->vocabulary().n_vocab());
    for (int32_t id : constraint_->vocabulary().end_tokens()) mask->allow(id);
    return mask;
  }
  return constraint_->allowed_tokens(matcher_);
}

void ConstraintState::apply(std::span<float> logits) { allowed_tokens()->apply(logits); }

void ConstraintState::accept(int32_t token) {
  const TokenVocabulary& vocab = constraint_->vocabulary();
  if (ended_ || token < 0 || token >= vocab.n_vocab()) return;
  if (vocab.is_end_token(token)) {
    ended_ = true;
    return;
  }
  const std::string& bytes = vocab.token_bytes(token);
  if (bytes.empty()) return;
  matcher_.advance(bytes);
}

ConstraintCache::ConstraintCache(std::shared_ptr<const Tokenizer> tokenizer, size_t max_entries,
                                 CompileOptions options)
    : tokenizer_(std::move(tokenizer)), max_entries_(max_entries), options_(options) {}

std::shared_ptr<const TokenVocabulary> ConstraintCache::vocabulary() {
  std::call_once(vocabulary_once_, [this] {
    vocabulary_ =
        std::make_shared<const TokenVocabulary>(TokenVocabulary::from_tokenizer(*tokenizer_));
  });
  return vocabulary_;
}

Result<std::shared_ptr<const Constraint>> ConstraintCache::get(
    FormatKind kind, const nlohmann::ordered_json& schema) {
  std::string key =
      kind == FormatKind::kJsonObject ? std::string("json_object") : "json_schema:" + schema.dump();
  {
    std::lock_guard lock(mutex_);
    if (auto it = entries_.find(key); it != entries_.end()) {
      recent_.splice(recent_.begin(), recent_, it->second.position);
      return it->second.constraint;
    }
  }
  // Compiled outside the lock: two requests with the same new schema may both compile it.
  Result<Grammar> grammar = kind == FormatKind::kJsonObject ? compile_json_object(options_)
                                                            : compile_json_schema(schema, options_);
  if (!grammar) return grammar.status();
  auto constraint = std::make_shared<const Constraint>(std::move(grammar).value(), vocabulary());
  std::lock_guard lock(mutex_);
  if (auto it = entries_.find(key); it != entries_.end()) return it->second.constraint;
  recent_.push_front(key);
  entries_.emplace(std::move(key), Entry{constraint, recent_.begin()});
  while (entries_.size() > max_entries_) {
    entries_.erase(recent_.back());
    recent_.pop_back();
  }
  return std::shared_ptr<const Constraint>(constraint);
}

}  // namespace llamaserve::grammar
