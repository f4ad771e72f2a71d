// Test support for the engine tests: a hand-built byte tokenizer, a scripted executor, and a
// helper that reads a request's whole event stream.
//
// ScriptedExecutor is a test executor that scripts logits; it is for testing engine logic
// only (scheduling, KV bookkeeping, streaming, limits), never model numerics. It keeps a
// shadow KV cache of token ids: every row writes its token into the (block, slot) its
// sequence's block table names, and the logits of a row are computed from the tokens read
// back through that table. A wrong table, a block reused while still in use, or a position
// skipped therefore changes the output, which the tests compare.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "executor/executor.h"
#include "tokenizer/tokenizer.h"

namespace llamaserve::testing {

// Vocabulary: 0 <unk>, 1 <s>, 2 </s> (eos), then one byte-fallback piece per byte value.
constexpr int32_t kEos = 2;
constexpr int32_t kByteBase = 3;
constexpr int32_t kByteVocab = kByteBase + 256;

inline int32_t byte_token(unsigned char byte) { return kByteBase + byte; }

inline std::vector<int32_t> byte_tokens(std::string_view text) {
  std::vector<int32_t> tokens;
  for (char c : text) tokens.push_back(byte_token(static_cast<unsigned char>(c)));
  return tokens;
}

inline std::shared_ptr<const Tokenizer> make_byte_tokenizer() {
  TokenizerData data;
  data.model = "llama";
  data.tokens = {"<unk>", "<s>", "</s>"};
  data.token_types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl};
  for (int b = 0; b < 256; ++b) {
    data.tokens.push_back(fmt::format("<0x{:02X}>", b));
    data.token_types.push_back(TokenType::kByte);
  }
  data.unk_id = 0;
  data.bos_id = 1;
  data.eos_id = kEos;
  data.add_bos = false;
  data.add_space_prefix = false;
  auto tokenizer = Tokenizer::create(std::move(data));
  EXPECT_TRUE(tokenizer.is_ok()) << tokenizer.status().to_string();
  return std::make_shared<const Tokenizer>(std::move(tokenizer).value());
}

class ScriptedExecutor : public Executor {
 public:
  // Writes the logits of the token that follows `context` (all tokens of the sequence up
  // to and including the row's position).
  using Script = std::function<void(std::span<const int32_t> context, std::span<float> logits)>;

  ScriptedExecutor(int32_t n_blocks, int32_t block_size, Script script, int64_t n_ctx_train = 4096)
      : script_(std::move(script)), kv_(static_cast<size_t>(n_blocks) * block_size, -1) {
    config_.arch = "scripted";
    config_.n_vocab = kByteVocab;
    config_.n_ctx_train = n_ctx_train;
    kv_info_.n_blocks = n_blocks;
    kv_info_.block_size = block_size;
    kv_info_.bytes_per_block = static_cast<uint64_t>(block_size) * sizeof(int32_t);
  }

  const ModelConfig& config() const override { return config_; }
  KvCacheInfo kv_info() const override { return kv_info_; }
  std::string describe() const override { return "scripted test executor"; }

  Status forward(const Batch& batch, std::span<float> logits) override {
    wait_at_gate();
    if (step_delay_ms_ > 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(step_delay_ms_.load()));
    forwards_.fetch_add(1);
    max_rows_seen_ = std::max<int64_t>(max_rows_seen_, batch.n_tokens());
    const int32_t bs = kv_info_.block_size;
    const auto n_rows = static_cast<size_t>(batch.n_tokens());
    if (batch.positions.size() != n_rows || batch.seq_index.size() != n_rows ||
        batch.block_tables.size() != static_cast<size_t>(batch.n_seqs()) * batch.blocks_per_seq ||
        logits.size() < batch.logit_rows.size() * static_cast<size_t>(kByteVocab)) {
      return Status(StatusCode::kInternal, "scripted executor: inconsistent batch arrays");
    }
    for (int32_t token : batch.tokens) {
      if (token == poison_token_.load())
        return Status(StatusCode::kInternal, "scripted executor: poisoned batch");
    }
    auto slot = [&](int32_t seq, int32_t position) -> int64_t {
      if (position / bs >= batch.blocks_per_seq) return -1;
      int32_t block = batch.block_table(seq)[position / bs];
      if (block < 0 || block >= kv_info_.n_blocks) return -1;
      return static_cast<int64_t>(block) * bs + position % bs;
    };
    std::vector<int32_t> expected_next(static_cast<size_t>(batch.n_seqs()), -1);
    for (size_t r = 0; r < n_rows; ++r) {
      int32_t seq = batch.seq_index[r];
      int32_t position = batch.positions[r];
      if (seq < 0 || seq >= batch.n_seqs()) return Status(StatusCode::kInternal, "bad seq index");
      if (expected_next[seq] >= 0 && position != expected_next[seq]) {
        return make_error(StatusCode::kInternal,
                          "row {}: positions of a sequence must be consecutive", r);
      }
      expected_next[seq] = position + 1;
      int64_t at = slot(seq, position);
      if (at < 0)
        return make_error(StatusCode::kInternal, "row {}: no KV block for position {}", r,
                          position);
      kv_[at] = batch.tokens[r];
    }
    for (int32_t s = 0; s < batch.n_seqs(); ++s) {
      if (expected_next[s] != batch.seq_lengths[s]) {
        return make_error(StatusCode::kInternal, "sequence {}: last row is not at seq_length - 1",
                          s);
      }
    }
    for (size_t i = 0; i < batch.logit_rows.size(); ++i) {
      const int32_t r = batch.logit_rows[i];
      const int32_t seq = batch.seq_index[r];
      std::vector<int32_t> context;
      for (int32_t p = 0; p <= batch.positions[r]; ++p) {
        int64_t at = slot(seq, p);
        if (at < 0 || kv_[at] < 0)
          return make_error(StatusCode::kInternal, "row {}: position {} was never written", r, p);
        context.push_back(kv_[at]);
      }
      std::span<float> row = logits.subspan(i * kByteVocab, kByteVocab);
      std::fill(row.begin(), row.end(), 0.0f);
      script_(context, row);
    }
    return Status::ok();
  }

  // Test hooks; safe to call from the test thread while the engine runs.
  void set_step_delay(std::chrono::milliseconds delay) {
    step_delay_ms_ = static_cast<int>(delay.count());
  }
  void set_poison_token(int32_t token) { poison_token_ = token; }
  void hold() {
    std::lock_guard lock(gate_mutex_);
    held_ = true;
  }
  void release() {
    {
      std::lock_guard lock(gate_mutex_);
      held_ = false;
    }
    gate_.notify_all();
  }
  // Blocks until the engine thread is waiting at the held gate.
  void wait_until_held() {
    std::unique_lock lock(gate_mutex_);
    gate_.wait(lock, [&] { return waiting_at_gate_; });
  }
  int64_t forwards() const { return forwards_.load(); }
  int64_t max_rows_seen() const { return max_rows_seen_.load(); }

 private:
  void wait_at_gate() {
    std::unique_lock lock(gate_mutex_);
    waiting_at_gate_ = held_;
    gate_.notify_all();
    gate_.wait(lock, [&] { return !held_; });
    waiting_at_gate_ = false;
  }

  ModelConfig config_;
  KvCacheInfo kv_info_;
  Script script_;
  std::vector<int32_t> kv_;  // token id per (block, slot); -1 = never written

  std::atomic<int> step_delay_ms_{0};
  std::atomic<int32_t> poison_token_{-1};
  std::atomic<int64_t> forwards_{0};
  std::atomic<int64_t> max_rows_seen_{0};
  std::mutex gate_mutex_;
  std::condition_variable gate_;
  bool held_ = false;
  bool waiting_at_gate_ = false;
};

// Scripts.

// One-hot logits: `token` gets 10, everything else 0 (greedy picks it; sampling mostly).
inline void favour(std::span<float> logits, int32_t token) {
  logits[static_cast<size_t>(token)] = 10.0f;
}

// The next lowercase letter after the context's last byte ('z' wraps to 'a'; a non-letter
// starts at 'a'): "ab" continues "cdef...".
inline void next_letter(std::span<const int32_t> context, std::span<float> logits) {
  int32_t last = context.back() - kByteBase;
  char next = (last >= 'a' && last < 'z') ? static_cast<char>(last + 1) : 'a';
  favour(logits, byte_token(static_cast<unsigned char>(next)));
}

// A letter chosen by a hash of the whole context: any change to what the engine lets the
// executor read (lost or stale KV) changes every later token.
inline void context_hash(std::span<const int32_t> context, std::span<float> logits) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t token : context) h = (h ^ static_cast<uint64_t>(token)) * 1099511628211ull;
  favour(logits, byte_token(static_cast<unsigned char>('a' + (h >> 33) % 26)));
}

// After the first '|' in the context, replies `reply` one byte per token, then eos.
inline ScriptedExecutor::Script reply_with(std::string reply) {
  return [reply](std::span<const int32_t> context, std::span<float> logits) {
    size_t separator = 0;
    while (separator < context.size() && context[separator] != byte_token('|')) ++separator;
    size_t index = context.size() - separator - 1;
    if (separator == context.size() || index >= reply.size()) {
      favour(logits, kEos);
    } else {
      favour(logits, byte_token(static_cast<unsigned char>(reply[index])));
    }
  };
}

// Everything a request's stream delivered.
struct Collected {
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<std::string> deltas;
  std::vector<std::vector<TokenLogprob>> logprobs;
  int n_finish = 0;
  GenerationEvent finish;
  bool timed_out = false;
};

inline Collected collect(RequestHandle& handle,
                         std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  Collected out;
  while (true) {
    std::optional<GenerationEvent> event = handle.next(timeout);
    if (!event) {
      out.timed_out = true;
      return out;
    }
    if (event->kind == GenerationEvent::Kind::kFinish) {
      ++out.n_finish;
      out.finish = std::move(*event);
      break;
    }
    out.text += event->text;
    out.deltas.push_back(event->text);
    out.tokens.insert(out.tokens.end(), event->tokens.begin(), event->tokens.end());
    for (auto& entry : event->logprobs) out.logprobs.push_back(std::move(entry));
  }
  // Nothing may follow the finish event.
  if (handle.next(std::chrono::milliseconds(0))) ++out.n_finish;
  return out;
}

// An Engine over a ScriptedExecutor (owned by the engine; the pointer stays valid while it
// lives), with `n_blocks` KV blocks of `block_size` tokens.
struct Harness {
  ScriptedExecutor* executor = nullptr;  // owned by the engine
  std::unique_ptr<Engine> engine;
};

inline Harness make_engine(ScriptedExecutor::Script script, EngineConfig config = {},
                           int32_t n_blocks = 256, int32_t block_size = 4) {
  auto executor = std::make_unique<ScriptedExecutor>(n_blocks, block_size, std::move(script));
  Harness harness;
  harness.executor = executor.get();
  auto engine = Engine::create(std::move(executor), make_byte_tokenizer(), config);
  EXPECT_TRUE(engine.is_ok()) << engine.status().to_string();
  harness.engine = std::move(engine).value();
  return harness;
}

inline GenerationRequest greedy_request(std::string_view prompt, int32_t max_new_tokens) {
  GenerationRequest request;
  request.prompt_tokens = byte_tokens(prompt);
  request.max_new_tokens = max_new_tokens;
  request.sampling.temperature = 0.0f;
  return request;
}

inline Collected run_one(Engine& engine, GenerationRequest request) {
  auto handle = engine.submit(std::move(request));
  EXPECT_TRUE(handle.is_ok()) << handle.status().to_string();
  if (!handle.is_ok()) return {};
  return collect(*handle);
}

// Waits until `n_finished` requests have finished (stats are a snapshot published after
// each step, so they may trail the events a moment), then checks every KV block is free.
inline void expect_all_blocks_free(const Engine& engine, uint64_t n_finished) {
  for (int i = 0; i < 400; ++i) {
    EngineStats stats = engine.stats();
    if (stats.requests_finished >= n_finished && stats.kv_blocks_free == stats.kv_blocks_total &&
        stats.running == 0 && stats.waiting == 0) {
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EngineStats stats = engine.stats();
  EXPECT_EQ(stats.requests_finished, n_finished);
  EXPECT_EQ(stats.kv_blocks_free, stats.kv_blocks_total);
  EXPECT_EQ(stats.running, 0);
  EXPECT_EQ(stats.waiting, 0);
}

// The text of each request: submitted all at once (`together`) or one after another.
// `together`: every request is submitted before any is collected; given the engine's executor,
// its first pass is held until all of them are queued, so that the schedule after it (how many
// run at once, which are preempted) does not depend on how fast the engine thread starts.
inline std::vector<std::string> run_texts(Engine& engine,
                                          const std::vector<GenerationRequest>& requests,
                                          bool together, ScriptedExecutor* executor = nullptr) {
  std::vector<std::string> texts;
  if (together) {
    std::vector<RequestHandle> handles;
    if (executor != nullptr) executor->hold();
    for (const auto& r : requests) handles.push_back(std::move(engine.submit(r).value()));
    if (executor != nullptr) executor->release();
    for (RequestHandle& handle : handles) texts.push_back(collect(handle).text);
  } else {
    for (const auto& r : requests) texts.push_back(run_one(engine, r).text);
  }
  return texts;
}

}  // namespace llamaserve::testing
