// POST /v1/embeddings: parse, tokenize each input like a completion prompt, check it against
// the model, admit and submit as one engine request, then wait for its one event while
// watching the client, and answer the pooled, normalized vectors.
#include <spdlog/spdlog.h>

#include <chrono>

#include "server/embedding_request.h"
#include "server/http_server.h"
#include "server/request_parser.h"
#include "tokenizer/prompt_builder.h"

namespace llamaserve::server {
namespace {

using Clock = std::chrono::steady_clock;

// Why an embedding request's finish event is not a result, as the error to answer with.
ApiError embedding_failure(const GenerationEvent& finish, const ServerConfig& options) {
  switch (finish.finish_reason) {
    case FinishReason::kTimeout:
      if (finish.usage.queue_ms >= finish.usage.total_ms) {
        return overloaded(fmt::format("the request waited in the queue longer than {} ms "
                                      "(--queue-timeout-ms); retry later",
                                      options.queue_timeout_ms),
                          "queue_timeout", 1);
      }
      return request_timeout(fmt::format("the request ran longer than {} ms (--request-timeout-ms)",
                                         options.request_timeout_ms));
    case FinishReason::kCancelled:
      return unavailable(
          "the request was cancelled: the server is shutting down, or its model was unloaded "
          "or replaced and the request ran past --drain-timeout-ms",
          "draining", 0);
    default: return api_error_from_status(finish.error);
  }
}

}  // namespace

bool HttpServer::handle_embeddings(http::Exchange& exchange, http::Response& res,
                                   RequestRecord& record) {
  std::optional<nlohmann::json> body = model_request_body(exchange.request(), res);
  if (!body) return false;
  Result<ParsedEmbeddings> parsed = parse_embeddings(*body);
  if (!parsed) {
    send_error(res, request_error(parsed.status()));
    return false;
  }
  auto lease = lease_model(parsed->model);
  if (!lease) {
    send_error(res, model_unavailable(lease.status()));
    return false;
  }
  const ModelService& model = lease->service();
  record.model = model.name();
  const auto n_embd = static_cast<int64_t>(model.engines().model_config().n_embd);
  if (parsed->dimensions && *parsed->dimensions != n_embd) {
    send_error(res, invalid_request(fmt::format("'dimensions' is {}; this model's embeddings have "
                                                "{} dimensions and are not shortened",
                                                *parsed->dimensions, n_embd),
                                    "invalid_value", "dimensions"));
    return false;
  }
  if (!model.engines().embeddings_supported()) {
    send_error(res, invalid_request(
                        fmt::format("model '{}' runs on a multi-GPU layout (tensor or pipeline "
                                    "parallel), which does not compute embeddings; serve it on "
                                    "the CPU or one GPU per replica",
                                    model.name()),
                        "unsupported_layout"));
    return false;
  }

  // Each input as a completion prompt would be: BOS where the model wants one.
  const Tokenizer& tokenizer = model.tokenizer();
  EmbeddingRequest request;
  request.id = record.id;
  request.pooling = model.spec().embedding_pooling;
  if (!parsed->texts.empty()) {
    request.inputs.reserve(parsed->texts.size());
    for (const std::string& text : parsed->texts) {
      request.inputs.push_back(encode_text_prompt(tokenizer, text));
    }
  } else {
    request.inputs = std::move(parsed->token_inputs);
  }
  const int32_t n_vocab = tokenizer.n_vocab();
  const int32_t max_context = model.engines().max_context();
  const int32_t max_tokens = options_.max_prompt_tokens > 0
                                 ? std::min(options_.max_prompt_tokens, max_context)
                                 : max_context;
  // Errors name the input as the request gave it: "input" alone, or "input[i]" of a list.
  const nlohmann::json& given = body->at("input");
  const bool listed = given.is_array() && !given.front().is_number();
  int32_t n_tokens = 0;
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    const std::vector<int32_t>& input = request.inputs[i];
    const std::string name = listed ? fmt::format("input[{}]", i) : std::string("input");
    if (input.empty()) {
      send_error(res, invalid_request(fmt::format("'{}' is empty after tokenization", name),
                                      "invalid_value", "input"));
      return false;
    }
    for (size_t t = 0; t < input.size(); ++t) {
      if (input[t] >= n_vocab) {
        send_error(res, invalid_request(fmt::format("'{}[{}]' = {} is outside the vocabulary "
                                                    "(0..{})",
                                                    name, t, input[t], n_vocab - 1),
                                        "invalid_value", "input"));
        return false;
      }
    }
    if (static_cast<int64_t>(input.size()) > max_tokens) {
      send_error(res, invalid_request(fmt::format("'{}' has {} tokens; this server embeds at most "
                                                  "{} per input (--max-prompt-tokens / context "
                                                  "size)",
                                                  name, input.size(), max_tokens),
                                      "context_length_exceeded", "input"));
      return false;
    }
    n_tokens += static_cast<int32_t>(input.size());
  }
  record.prompt_tokens = n_tokens;

  std::optional<InFlightCounter::Ticket> admission = try_admit();
  if (!admission) {
    send_error(res, at_capacity());
    return false;
  }
  request.timeout = std::chrono::milliseconds(options_.request_timeout_ms);
  request.queue_timeout = std::chrono::milliseconds(options_.queue_timeout_ms);
  auto handle = model.engines().submit_embedding(std::move(request));
  if (!handle) {
    send_error(res, submit_refused(handle.status()));
    return false;
  }

  // Counted as a response in progress, so that a drain waits for it; `lease` keeps the model
  // version open until the answer is built.
  InFlightCounter::Ticket in_flight = active_generations_.acquire();
  std::optional<GenerationEvent> finish;
  while (!finish) {
    if (exchange.client_gone()) {
      handle->cancel();
      record.status = kClientClosedStatus;
      record.finish_reason = finish_reason_name(FinishReason::kCancelled);
      finish_record(record);
      return true;
    }
    finish = handle->next(kLivenessPoll);
  }
  admission.reset();
  record.finish_reason = finish_reason_name(finish->finish_reason);
  if (finish->finish_reason != FinishReason::kStop) {
    const ApiError error = embedding_failure(*finish, options_);
    if (error.http_status >= 500) {
      spdlog::error("request {}: embeddings failed: {}", record.id, finish->error.to_string());
    }
    send_error(res, error);
    return false;
  }
  send_json(res, 200,
            embeddings_response(finish->embeddings, static_cast<size_t>(n_embd), parsed->encoding,
                                model.name(), finish->usage.prompt_tokens));
  return false;
}

}  // namespace llamaserve::server
