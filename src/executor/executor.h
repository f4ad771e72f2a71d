// Executor: turns a Batch into logits across one or more devices. SingleDevice (CPU or one
// GPU), Pipeline, TensorParallel; replicas are whole Executors behind a router in the engine
// layer. The engine thread is the only caller.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "backend/batch.h"
#include "core/status.h"
#include "model/config.h"

namespace llamaserve {

class Executor {
 public:
  virtual ~Executor() = default;

  virtual const ModelConfig& config() const = 0;
  virtual KvCacheInfo kv_info() const = 0;
  // Human-readable description for logs ("cpu, 2 threads", "cuda:0").
  virtual std::string describe() const = 0;

  // Runs the model over `batch`, writing its tokens' K/V into the cache blocks the batch
  // names, and writes the logits of batch.logit_rows to `logits`, row-major
  // [logit_rows.size() × n_vocab].
  // PRECONDITIONS: positions of a sequence are consecutive and follow what is already in its
  // blocks; block tables cover seq_lengths; logits.size() >= logit_rows.size() * n_vocab.
  virtual Status forward(const Batch& batch, std::span<float> logits) = 0;

  // Whether forward_sampled() draws tokens where the logits are (a GPU), so that only token
  // ids cross to the host.
  virtual bool samples_on_device() const { return false; }
  // forward(), then one token per logit row drawn on the device with sampling[i] into
  // tokens[i]. The logits are also copied to `logits` unless it is empty (for rows the host
  // samples itself: penalties, log probabilities).
  // PRECONDITIONS: as forward(); sampling.size() == tokens.size() == logit_rows.size();
  // logits empty or as forward() needs.
  virtual Status forward_sampled(const Batch& batch, std::span<const RowSampling> sampling,
                                 std::span<int32_t> tokens, std::span<float> logits);

  // Whether forward_hidden() is implemented (one-device executors; not the multi-GPU ones).
  virtual bool returns_hidden() const { return false; }
  // Runs the model over `batch` like forward(), but writes the final-normed hidden state (the
  // output norm applied, the output projection not) of batch.logit_rows to `hidden`, row-major
  // [logit_rows.size() × n_embd]: what embeddings are pooled from. kUnsupported by default.
  // PRECONDITIONS: as forward(); hidden.size() >= logit_rows.size() * n_embd.
  virtual Status forward_hidden(const Batch& batch, std::span<float> hidden);
};

}  // namespace llamaserve
