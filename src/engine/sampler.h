// Sampler: turns one row of logits into the next token, per request.
//
// Order of operations (the same for every request):
//   0. the response-format constraint, if any: tokens that cannot continue a valid document
//      get -infinity (grammar/constraint.h);
//   1. penalties on the raw logits: repetition (CTRL-style: positive logits divided by the
//      penalty, negative ones multiplied) over every token seen, prompt and output; presence
//      and frequency (OpenAI-style: logit -= presence * [count > 0] + frequency * count) over
//      the generated tokens only;
//   2. temperature: logits / temperature; temperature 0 means greedy (argmax, lowest id on
//      ties) and skips the rest;
//   3. truncation, each step renormalising what the previous one kept: top-k, then top-p
//      (smallest set of most likely tokens whose mass reaches top_p), then min-p (tokens
//      whose probability is at least min_p times the most likely one's);
//   4. one draw from the kept tokens with the request's own std::mt19937_64.
//
// Log probabilities (when asked for) are the log-softmax of the logits after step 2 and
// before truncation: penalties and temperature included, top-k/top-p/min-p not (so
// alternatives outside the sampled set still get a finite value). For greedy requests the
// temperature is taken as 1.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "backend/batch.h"
#include "engine/request.h"
#include "grammar/constraint.h"

namespace llamaserve {

struct SampledToken {
  int32_t token = 0;
  float logprob = 0.0f;  // of `token`; 0 unless logprobs were requested
  // The top_logprobs most likely tokens, most likely first (may include `token`).
  std::vector<std::pair<int32_t, float>> top_logprobs;
};

// Scratch buffers shared by all samplers of one engine thread (one vocabulary row each), so
// hundreds of live requests do not each hold their own.
struct SamplerScratch {
  struct Candidate {
    float logit;
    float weight;  // exp(logit - max logit): unnormalised probability
    int32_t token;
  };
  std::vector<Candidate> candidates;
};

class Sampler {
 public:
  // `prompt` feeds the repetition penalty. The seed fixes every draw of this request.
  Sampler(const SamplingParams& params, std::span<const int32_t> prompt, uint64_t seed);

  bool greedy() const { return params_.temperature <= 0.0f; }
  bool wants_logprobs() const { return params_.logprobs || params_.top_logprobs > 0; }

  // The parameters with which a device draws this request's next token, `step` being the
  // number of tokens generated so far (the draw's counter); nothing when the request needs
  // the host sampler (penalties, min-p, log probabilities). A response-format constraint goes
  // along as the mask of the tokens it allows now, held here until the next call. Greedy
  // draws are the same token on either side; random draws differ in their generator (device:
  // Philox keyed by seed and step).
  std::optional<RowSampling> device_sampling(uint64_t step);

  // Picks the next token from `logits` (one row of n_vocab; modified in place).
  SampledToken sample(std::span<float> logits, SamplerScratch& scratch);
  // Records a generated token for the penalties and advances the constraint. Recomputing a
  // preempted sequence re-reads tokens but samples none, so the constraint, which lives here
  // beside the sequence, keeps its place.
  void accept(int32_t token);

 private:
  void apply_penalties(std::span<float> logits) const;
  void fill_logprobs(std::span<const float> logits, SampledToken& out,
                     SamplerScratch& scratch) const;
  int32_t draw(std::span<const float> logits, SamplerScratch& scratch);
  double uniform();  // [0, 1) from 53 random bits: the same on every standard library

  SamplingParams params_;
  std::optional<grammar::ConstraintState> constraint_;
  std::shared_ptr<const grammar::TokenMask> device_mask_;  // of the last device_sampling()
  uint64_t seed_;
  std::mt19937_64 rng_;
  std::unordered_set<int32_t> seen_;                    // prompt and output tokens
  std::unordered_map<int32_t, int32_t> output_counts_;  // token -> times generated
};

}  // namespace llamaserve
