// ModelService: the one place that opens a model for serving. open() loads the GGUF file, its
// tokenizer and chat template, builds the executors of the spec's layout (one device, tensor
// and pipeline parallel, replicas, or rank 0 of a group of processes), starts one engine per
// replica behind an EngineGroup, and warms every replica up. The service owns all of it until
// close() (or destruction), which shuts the engines down and frees the executors' device
// memory. `serve`, `run`, `chat` and the JNI engine open their models here; `tp-worker` runs
// its rank through run_tp_worker().
//
// Threads: every const member may be called from any thread; close() from one.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/status.h"
#include "engine/engine_group.h"
#include "grammar/constraint.h"
#include "model/weights.h"
#include "service/config.h"
#include "service/layout_factory.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "toolcall/tool_call.h"

namespace llamaserve {

// What the caller adds to a spec when opening it.
struct OpenHooks {
  // Loading reported on stderr (service/load_progress.h); off for embedded use.
  bool show_progress = true;
  // Tensor parallel across processes, rank 0: called once rank 0 listens (the port).
  std::function<void(int port)> on_tp_listening;
};

class ModelService {
 public:
  // Errors name the file or the option that was wrong; nothing stays allocated on failure.
  static Result<std::unique_ptr<ModelService>> open(const ModelSpec& spec,
                                                    const OpenHooks& hooks = {});
  ~ModelService();
  ModelService(const ModelService&) = delete;
  ModelService& operator=(const ModelService&) = delete;

  // Shuts the engines down and frees the executors (device memory included), the weights and
  // the file mapping once no request handle holds them. Idempotent.
  void close();

  const ModelSpec& spec() const { return spec_; }
  const std::string& name() const { return name_; }
  const ModelConfig& model_config() const { return model_->config; }
  EngineGroup& engines() const { return *engines_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  // None: the model has no usable template and none was named; chat requests are refused.
  const std::optional<ChatTemplate>& chat_template() const { return chat_template_; }
  // How the chat template treats tools and how the model writes calls (toolcall/).
  const toolcall::TemplateToolSupport& tool_support() const { return tool_support_; }
  // Tokens per sequence.
  int64_t context_tokens() const { return context_tokens_; }
  // The model's compiled response formats (structured output), by schema text; the
  // vocabulary trie is built on the first one.
  grammar::ConstraintCache& constraints() const { return *constraints_; }
  // Unix seconds when it was opened, for /v1/models.
  int64_t created() const { return created_; }

 private:
  ModelService() = default;
  Status start(const OpenHooks& hooks);
  Status warm_up(const EngineConfig& config);

  ModelSpec spec_;
  std::string name_;
  std::shared_ptr<const LoadedModel> model_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::optional<ChatTemplate> chat_template_;
  toolcall::TemplateToolSupport tool_support_;
  int64_t context_tokens_ = 0;
  int64_t created_ = 0;
  std::unique_ptr<EngineGroup> engines_;
  std::unique_ptr<grammar::ConstraintCache> constraints_;
};

// The executor options of one replica's worth of the spec's layout, for a model whose
// sequences hold `context_tokens`: the one mapping from the configuration tree to the
// executors (service/layout_factory.h splits them per replica).
ExecutorOptions executor_options(const ModelSpec& spec, int64_t context_tokens);

// The engine settings of the spec for a model whose sequences hold `context_tokens`.
EngineConfig engine_config(const ModelSpec& spec, int64_t context_tokens);

// Tensor parallel across processes: this process's part of the spec's group.
TpProcessOptions tp_process_options(const LayoutSpec& layout);

// Checks a spec's layout before anything loads (device counts, ranks, the layer split), so
// that a command can refuse bad options at once.
Status check_layout(const ModelSpec& spec);

// `tp-worker`: rank spec.layout.tp_rank >= 1 of a group of processes. Loads the model, joins
// rank 0 and runs its passes until rank 0 is done with this rank (ok) or the group fails.
Status run_tp_worker(const ModelSpec& spec, const OpenHooks& hooks = {});

}  // namespace llamaserve
