#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace llamaserve {
namespace {

using Candidate = SamplerScratch::Candidate;

// Most likely first; ties broken by the lower token id so results never depend on the
// selection algorithm.
bool more_likely(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.token < b.token);
}

double weight_sum(const Candidate* begin, const Candidate* end) {
  double sum = 0.0;
  for (const Candidate* c = begin; c != end; ++c) sum += c->weight;
  return sum;
}

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

float max_of(std::span<const float> logits) {
  float best = -std::numeric_limits<float>::infinity();
  for (float value : logits) best = std::max(best, value);
  return best;
}

}  // namespace

Sampler::Sampler(const SamplingParams& params, std::span<const int32_t> prompt, uint64_t seed)
    : params_(params), seed_(seed), rng_(seed) {
  if (params_.repetition_penalty != 1.0f) seen_.insert(prompt.begin(), prompt.end());
  if (params_.constraint) constraint_.emplace(params_.constraint);
}

std::optional<RowSampling> Sampler::device_sampling(uint64_t step) {
  if (params_.repetition_penalty != 1.0f || params_.presence_penalty != 0.0f ||
      params_.frequency_penalty != 0.0f || params_.min_p > 0.0f || wants_logprobs()) {
    return std::nullopt;
  }
  RowSampling row;
  if (constraint_) {
    device_mask_ = constraint_->allowed_tokens();
    row.allowed = device_mask_->words.data();
    row.allowed_words = static_cast<int32_t>(device_mask_->words.size());
  }
  row.temperature = greedy() ? 0.0f : params_.temperature;
  row.top_k = params_.top_k;
  row.top_p = params_.top_p;
  row.seed = seed_;
  row.offset = step;
  return row;
}

void Sampler::accept(int32_t token) {
  if (constraint_) constraint_->accept(token);
  if (params_.repetition_penalty != 1.0f) seen_.insert(token);
  if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f)
    ++output_counts_[token];
}

void Sampler::apply_penalties(std::span<float> logits) const {
  const auto n_vocab = static_cast<int32_t>(logits.size());
  const float repetition = params_.repetition_penalty;
  if (repetition != 1.0f) {
    for (int32_t token : seen_) {
      if (token < 0 || token >= n_vocab) continue;
      float& logit = logits[token];
      logit = logit > 0.0f ? logit / repetition : logit * repetition;
    }
  }
  for (const auto& [token, count] : output_counts_) {
    if (token < 0 || token >= n_vocab) continue;
    logits[token] -=
        params_.presence_penalty + params_.frequency_penalty * static_cast<float>(count);
  }
}

SampledToken Sampler::sample(std::span<float> logits, SamplerScratch& scratch) {
  if (constraint_) constraint_->apply(logits);
  apply_penalties(logits);
  SampledToken out;
  if (greedy()) {
    out.token = argmax(logits);
  } else {
    if (params_.temperature != 1.0f) {
      const float inv_temperature = 1.0f / params_.temperature;
      for (float& logit : logits) logit *= inv_temperature;
    }
    out.token = draw(logits, scratch);
  }
  if (wants_logprobs()) fill_logprobs(logits, out, scratch);
  return out;
}

void Sampler::fill_logprobs(std::span<const float> logits, SampledToken& out,
                            SamplerScratch& scratch) const {
  const float max_logit = max_of(logits);
  double sum = 0.0;
  for (float logit : logits) sum += std::exp(static_cast<double>(logit - max_logit));
  const float log_normalizer = max_logit + static_cast<float>(std::log(sum));
  out.logprob = logits[out.token] - log_normalizer;

  const auto n_top =
      std::min<size_t>(static_cast<size_t>(std::max(params_.top_logprobs, 0)), logits.size());
  if (n_top == 0) return;
  auto& candidates = scratch.candidates;
  candidates.clear();
  for (size_t i = 0; i < logits.size(); ++i)
    candidates.push_back({logits[i], 0.0f, static_cast<int32_t>(i)});
  std::partial_sort(candidates.begin(), candidates.begin() + static_cast<ptrdiff_t>(n_top),
                    candidates.end(), more_likely);
  out.top_logprobs.reserve(n_top);
  for (size_t i = 0; i < n_top; ++i) {
    out.top_logprobs.emplace_back(candidates[i].token, candidates[i].logit - log_normalizer);
  }
}

int32_t Sampler::draw(std::span<const float> logits, SamplerScratch& scratch) {
  const size_t n_vocab = logits.size();
  const float max_logit = max_of(logits);
  const bool use_top_k = params_.top_k > 0 && static_cast<size_t>(params_.top_k) < n_vocab;
  const bool use_top_p = params_.top_p < 1.0f;
  const bool use_min_p = params_.min_p > 0.0f;

  if (!use_top_k && !use_top_p) {
    // No ranking needed: min-p is a threshold on the logit (p >= min_p * p_max).
    const float floor =
        use_min_p ? max_logit + std::log(params_.min_p) : -std::numeric_limits<float>::infinity();
    double total = 0.0;
    for (float logit : logits) {
      if (logit >= floor) total += std::exp(static_cast<double>(logit - max_logit));
    }
    const double target = uniform() * total;
    double acc = 0.0;
    int32_t last_kept = argmax(logits);
    for (size_t i = 0; i < n_vocab; ++i) {
      if (logits[i] < floor) continue;
      acc += std::exp(static_cast<double>(logits[i] - max_logit));
      last_kept = static_cast<int32_t>(i);
      if (acc > target) return last_kept;
    }
    return last_kept;  // rounding left target just above the sum
  }

  // The kept set is the prefix [0, n_kept) of `candidates`, found by selection rather than
  // sorting: a vocabulary of tens of thousands costs O(n_vocab) per token, not O(n log n).
  auto& candidates = scratch.candidates;
  candidates.clear();
  for (size_t i = 0; i < n_vocab; ++i) {
    candidates.push_back({logits[i], std::exp(logits[i] - max_logit), static_cast<int32_t>(i)});
  }
  Candidate* const first = candidates.data();
  size_t n_kept = n_vocab;
  if (use_top_k) {
    n_kept = static_cast<size_t>(params_.top_k);
    std::nth_element(first, first + n_kept, first + n_vocab, more_likely);
  }
  if (use_top_p) {
    // Smallest k whose k most likely tokens reach the mass, by bisection on k with
    // nth_element over the undecided range. Invariant: the top `lo` fall short of the
    // target, the top `hi` reach it.
    const double target = static_cast<double>(params_.top_p) * weight_sum(first, first + n_kept);
    size_t lo = 0;
    size_t hi = n_kept;
    double mass_lo = 0.0;
    while (hi - lo > 1) {
      const size_t mid = lo + (hi - lo) / 2;
      std::nth_element(first + lo, first + mid, first + hi, more_likely);
      const double mass_mid = mass_lo + weight_sum(first + lo, first + mid);
      if (mass_mid >= target) {
        hi = mid;
      } else {
        lo = mid;
        mass_lo = mass_mid;
      }
    }
    n_kept = hi;
  }
  if (use_min_p) {
    // The kept set always holds the most likely token, so max_logit is its maximum too.
    const float floor = max_logit + std::log(params_.min_p);
    n_kept =
        static_cast<size_t>(std::partition(first, first + n_kept,
                                           [&](const Candidate& c) { return c.logit >= floor; }) -
                            first);
  }

  const double target = uniform() * weight_sum(first, first + n_kept);
  double acc = 0.0;
  for (size_t i = 0; i < n_kept; ++i) {
    acc += first[i].weight;
    if (acc > target) return first[i].token;
  }
  return first[n_kept - 1].token;
}

double Sampler::uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

}  // namespace llamaserve
