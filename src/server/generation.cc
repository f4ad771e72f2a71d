// The generation routes (POST /v1/chat/completions, /v1/completions, /chat): parse,
// tokenize, submit, then answer from the request's event stream, watching the client.
#include <spdlog/spdlog.h>

#include <chrono>

#include "server/http_server.h"
#include "server/request_parser.h"
#include "server/response_format.h"
#include "tokenizer/prompt_builder.h"
#include "toolcall/tool_prompt.h"

namespace llamaserve::server {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double ms_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

// The limits a request ran under, for the messages of requests that exceed them.
struct SessionLimits {
  std::chrono::milliseconds queue_timeout;
  std::chrono::milliseconds request_timeout;
};

// One admitted generation request, from the engine's first event to the last byte sent.
// Owns the request record: its destructor logs and counts the request, and cancels the
// generation if it is still running (the client left, or the response was abandoned).
class GenerationSession {
 public:
  // `admission` (HttpServer::try_admit) is released when the finish event arrives or when
  // the session is destroyed; `in_flight` when the session is destroyed, after the record.
  GenerationSession(HttpServer& server, RequestHandle handle, http::Exchange& exchange,
                    std::unique_ptr<ResponseFormat> format, RequestRecord record,
                    InFlightCounter::Ticket admission, InFlightCounter::Ticket in_flight,
                    SessionLimits limits)
      : server_(server),
        handle_(std::move(handle)),
        exchange_(exchange),
        format_(std::move(format)),
        record_(std::move(record)),
        admission_(std::move(admission)),
        in_flight_(std::move(in_flight)),
        limits_(limits) {
    server_.metrics().add_http_in_flight(1);
  }

  ~GenerationSession() {
    if (!finished_) {
      // The finish event is not waited for: the generation is counted as cancelled here.
      handle_.cancel();
      if (record_.status == 0) record_.status = kClientClosedStatus;
      record_.finish_reason = finish_reason_name(FinishReason::kCancelled);
      server_.metrics().record_finish_reason(record_.finish_reason, record_.model);
      server_.metrics().observe_request_duration(record_.model,
                                                 ms_between(record_.start, Clock::now()) / 1000.0);
    }
    admission_.release();
    server_.finish_record(record_);
    server_.metrics().add_http_in_flight(-1);
    in_flight_.release();
  }

  // The next event, or nullopt once the client has gone (the generation is then cancelled).
  // The connection is checked every kLivenessPoll whether or not events keep coming: a
  // non-streamed response writes nothing until the end, so a steady flow of tokens must not
  // hide a client that left.
  std::optional<GenerationEvent> next_event() {
    while (true) {
      const auto now = std::chrono::steady_clock::now();
      if (now >= next_liveness_check_) {
        next_liveness_check_ = now + kLivenessPoll;
        if (exchange_.client_gone()) {
          client_gone();
          return std::nullopt;
        }
      }
      if (auto event = handle_.next(kLivenessPoll)) {
        observe(*event);
        return event;
      }
    }
  }

  // Why a finish event is not a normal end, as the error to answer with; nullopt for
  // kStop / kLength.
  std::optional<ApiError> failure(const GenerationEvent& finish) const {
    switch (finish.finish_reason) {
      case FinishReason::kStop:
      case FinishReason::kLength: return std::nullopt;
      case FinishReason::kTimeout:
        // Never scheduled (queue time is all of its time): the server was too busy.
        if (finish.usage.completion_tokens == 0 && finish.usage.queue_ms >= finish.usage.total_ms) {
          return overloaded(fmt::format("the request waited in the queue longer than {} ms "
                                        "(--queue-timeout-ms); retry later",
                                        limits_.queue_timeout.count()),
                            "queue_timeout", 1);
        }
        return request_timeout(
            fmt::format("the request ran longer than {} ms (--request-timeout-ms)",
                        limits_.request_timeout.count()));
      case FinishReason::kCancelled:
        return unavailable(
            "the request was cancelled: the server is shutting down, or its model was unloaded "
            "or replaced and the request ran past --drain-timeout-ms",
            "draining", 0);
      case FinishReason::kError:
      case FinishReason::kNone: break;
    }
    ApiError error = api_error_from_status(finish.error);
    if (error.http_status >= 500) {
      spdlog::error("request {}: generation failed: {}", record_.id, finish.error.to_string());
    }
    return error;
  }

  // Waits for the first event before any byte is sent, so that a request that ends without
  // output (queue timeout, shutdown) still gets a proper HTTP status.
  bool wait_first_event() {
    first_event_ = next_event();
    return first_event_.has_value();
  }
  const GenerationEvent& first_event() const { return *first_event_; }

  // Collects the whole generation and answers it in one response.
  void respond() {
    std::optional<GenerationEvent> event = std::move(first_event_);
    while (event && event->kind == GenerationEvent::Kind::kDelta) {
      format_->collect(*event);
      event = next_event();
    }
    if (!event) return;  // the client left; the destructor records it
    finished_ = true;
    http::Response res;
    if (auto error = failure(*event)) {
      send_error(res, *error);
      record_.error = error->message;
    } else {
      res.status = 200;
      res.set_header("Content-Type", "application/json");
      res.body = format_->body(*event);
    }
    record_.status = res.status;
    server_.decorate(res, record_);
    exchange_.respond(std::move(res));
  }

  // Streams the generation as server-sent events, one write per event. False when the client
  // left first.
  bool stream() {
    http::Response head;
    head.status = 200;
    head.set_header("Content-Type", "text/event-stream");
    head.set_header("Cache-Control", "no-cache");
    head.set_header("X-Accel-Buffering", "no");
    server_.decorate(head, record_);
    exchange_.start_stream(std::move(head));
    if (!write(format_->stream_begin())) return false;
    std::optional<GenerationEvent> event = std::move(first_event_);
    while (true) {
      if (!event) event = next_event();
      if (!event) return false;
      if (event->kind == GenerationEvent::Kind::kDelta) {
        if ((!event->text.empty() || !event->logprobs.empty()) &&
            !write(format_->stream_delta(*event))) {
          return false;
        }
        event.reset();
        continue;
      }
      finished_ = true;
      if (auto error = failure(*event)) {
        record_.status = error->http_status;
        record_.error = error->message;
        if (!write(format_->stream_error(*error))) return false;
      } else {
        record_.status = 200;
        if (!write(format_->stream_end(*event))) return false;
      }
      exchange_.end_stream();
      return true;
    }
  }

 private:
  bool write(const std::string& bytes) {
    if (bytes.empty()) return true;
    // A write into the socket buffer can succeed after the peer left; the liveness check
    // catches that before the next token instead of one write later.
    if (!exchange_.write(bytes) || exchange_.client_gone()) {
      client_gone();
      return false;
    }
    return true;
  }

  void client_gone() {
    handle_.cancel();
    if (!finished_) record_.status = kClientClosedStatus;
  }

  void observe(const GenerationEvent& event) {
    const Clock::time_point now = Clock::now();
    ServerMetrics& metrics = server_.metrics();
    if (event.kind == GenerationEvent::Kind::kDelta) {
      if (event.tokens.empty()) return;
      // Counted as they arrive so that a request cut short still logs what it produced.
      record_.completion_tokens += static_cast<int32_t>(event.tokens.size());
      if (!has_token_) {
        has_token_ = true;
        record_.ttft_ms = ms_between(record_.start, now);
        metrics.observe_time_to_first_token(record_.model, record_.ttft_ms / 1000.0);
      } else {
        // Tokens that arrive together (held back for a stop string or a split character)
        // share the gap.
        const double gap_s = ms_between(last_token_, now) / 1000.0 / event.tokens.size();
        for (size_t i = 0; i < event.tokens.size(); ++i) {
          metrics.observe_inter_token_latency(record_.model, gap_s);
        }
      }
      last_token_ = now;
      return;
    }
    admission_.release();
    record_.prompt_tokens = event.usage.prompt_tokens;
    record_.completion_tokens = event.usage.completion_tokens;
    record_.finish_reason = finish_reason_name(event.finish_reason);
    metrics.record_finish_reason(record_.finish_reason, record_.model);
    metrics.observe_request_duration(record_.model, ms_between(record_.start, now) / 1000.0);
  }

  HttpServer& server_;
  RequestHandle handle_;
  http::Exchange& exchange_;
  std::chrono::steady_clock::time_point next_liveness_check_{};
  std::unique_ptr<ResponseFormat> format_;
  RequestRecord record_;
  std::optional<GenerationEvent> first_event_;
  InFlightCounter::Ticket admission_;
  InFlightCounter::Ticket in_flight_;
  SessionLimits limits_;
  bool finished_ = false;  // the finish event was consumed
  bool has_token_ = false;
  Clock::time_point last_token_;
};

namespace {

// The constraint of a request's response_format, compiled (or found in the model's cache).
// Errors are the schema compiler's, prefixed with where in the request the schema is.
Result<std::shared_ptr<const grammar::Constraint>> response_format_constraint(
    const ModelService& model, const ResponseFormatSpec& format, std::string_view body) {
  if (format.kind == ResponseFormatSpec::Kind::kJsonObject) {
    return model.constraints().get(grammar::FormatKind::kJsonObject, {});
  }
  // Parsed again, keeping the order of object keys: properties are generated in the order
  // the schema lists them.
  nlohmann::ordered_json schema;
  try {
    schema =
        nlohmann::ordered_json::parse(body).at("response_format").at("json_schema").at("schema");
  } catch (const nlohmann::json::exception& e) {
    return make_error(StatusCode::kInvalidArgument, "'response_format.json_schema.schema': {}",
                      e.what());
  }
  auto constraint = model.constraints().get(grammar::FormatKind::kJsonSchema, schema);
  if (!constraint) {
    return Status(constraint.status().code(),
                  "'response_format.json_schema.schema': " + constraint.status().message());
  }
  return constraint;
}

}  // namespace

Result<std::vector<int32_t>> HttpServer::build_prompt(const ModelService& model,
                                                      const ParsedGeneration& parsed) const {
  const Tokenizer& tokenizer = model.tokenizer();
  std::vector<int32_t> tokens;
  switch (parsed.prompt_kind) {
    case PromptKind::kMessages: {
      if (!model.chat_template()) {
        return Status(StatusCode::kUnsupported,
                      "this model has no chat template; use /v1/completions or start the server "
                      "with --chat-template");
      }
      // Tools go to a template that lists them; otherwise the conversation describes them.
      const toolcall::TemplateToolSupport& support = model.tool_support();
      const bool offer_tools = parsed.tools.calls_enabled();
      ChatRenderExtras extras;
      if (offer_tools && support.renders_tools) extras.tools = parsed.tools.tools;
      const std::vector<ChatMessage> messages = toolcall::messages_for_template(
          parsed.messages, offer_tools ? parsed.tools.tools : nlohmann::ordered_json(), support);
      LS_ASSIGN_OR_RETURN(
          tokens, encode_chat_prompt(*model.chat_template(), tokenizer, messages, true, extras));
      break;
    }
    case PromptKind::kText: tokens = encode_text_prompt(tokenizer, parsed.prompt_text); break;
    case PromptKind::kTokens: {
      const int32_t n_vocab = tokenizer.n_vocab();
      for (size_t i = 0; i < parsed.prompt_tokens.size(); ++i) {
        if (parsed.prompt_tokens[i] >= n_vocab) {
          return make_error(StatusCode::kInvalidArgument,
                            "'prompt[{}]' = {} is outside the vocabulary (0..{})", i,
                            parsed.prompt_tokens[i], n_vocab - 1);
        }
      }
      tokens = parsed.prompt_tokens;
      break;
    }
  }
  if (tokens.empty()) {
    return Status(StatusCode::kInvalidArgument, "the prompt is empty after tokenization");
  }
  return tokens;
}

bool HttpServer::handle_generation(const Route& route, http::Exchange& exchange,
                                   http::Response& res, RequestRecord& record) {
  const http::Request& req = exchange.request();
  std::optional<nlohmann::json> body = model_request_body(req, res);
  if (!body) return false;
  ParseLimits limits;
  limits.max_tokens_limit = options_.max_tokens_limit;
  Result<ParsedGeneration> parsed = Status(StatusCode::kInternal, "unparsed");
  switch (route.id) {
    case RouteId::kChatCompletions: parsed = parse_chat_completion(*body, limits); break;
    case RouteId::kCompletions: parsed = parse_completion(*body, limits); break;
    default: parsed = parse_simple_chat(*body, limits); break;
  }
  if (!parsed) {
    send_error(res, request_error(parsed.status()));
    return false;
  }
  if (parsed->tools.tools.is_array()) {
    // Parsed again keeping key order: the template shows the tools as the client wrote them.
    parsed->tools.tools = nlohmann::ordered_json::parse(req.body).at("tools");
  }
  auto lease = lease_model(parsed->model);
  if (!lease) {
    send_error(res, model_unavailable(lease.status()));
    return false;
  }
  if (parsed->keep_alive_ms) {
    registry()->set_keep_alive(lease->service().name(),
                               std::chrono::milliseconds(*parsed->keep_alive_ms));
  }
  const ModelService* model = &lease->service();
  record.model = model->name();
  auto prompt = build_prompt(*model, *parsed);
  if (!prompt) {
    send_error(res, api_error_from_status(prompt.status()));
    return false;
  }
  const auto n_prompt = static_cast<int32_t>(prompt->size());
  const int32_t max_context = model->engines().max_context();
  const int32_t max_prompt = options_.max_prompt_tokens > 0
                                 ? std::min(options_.max_prompt_tokens, max_context - 1)
                                 : max_context - 1;
  record.prompt_tokens = n_prompt;
  if (n_prompt > max_prompt) {
    send_error(res, invalid_request(fmt::format("the prompt has {} tokens; this server accepts at "
                                                "most {} (--max-prompt-tokens / context size)",
                                                n_prompt, max_prompt),
                                    "context_length_exceeded"));
    return false;
  }
  int32_t max_new_tokens = std::min(options_.max_tokens_limit, max_context - n_prompt);
  if (parsed->max_tokens) {
    if (n_prompt + *parsed->max_tokens > max_context) {
      send_error(res, invalid_request(fmt::format("the prompt ({} tokens) plus max_tokens ({}) "
                                                  "exceeds the context of {} tokens",
                                                  n_prompt, *parsed->max_tokens, max_context),
                                      "context_length_exceeded", "max_tokens"));
      return false;
    }
    max_new_tokens = *parsed->max_tokens;
  }
  std::shared_ptr<const grammar::Constraint> constraint;
  if (parsed->response_format.kind != ResponseFormatSpec::Kind::kText) {
    auto compiled = response_format_constraint(*model, parsed->response_format, req.body);
    if (!compiled) {
      const bool unsupported = compiled.status().code() == StatusCode::kUnsupported ||
                               compiled.status().code() == StatusCode::kOutOfRange;
      send_error(res, invalid_request(compiled.status().message(),
                                      unsupported ? "unsupported_schema" : "invalid_schema",
                                      "response_format"));
      return false;
    }
    constraint = std::move(compiled).value();
  } else if (parsed->tools.forced()) {
    auto compiled = model->constraints().get(
        grammar::FormatKind::kJsonSchema,
        toolcall::forced_call_schema(parsed->tools.tools, parsed->tools.choice,
                                     parsed->tools.parallel_calls));
    if (!compiled) {
      const bool unsupported = compiled.status().code() == StatusCode::kUnsupported ||
                               compiled.status().code() == StatusCode::kOutOfRange;
      send_error(res,
                 invalid_request("a function's 'parameters': " + compiled.status().message(),
                                 unsupported ? "unsupported_schema" : "invalid_schema", "tools"));
      return false;
    }
    constraint = std::move(compiled).value();
  }

  std::optional<InFlightCounter::Ticket> admission = try_admit();
  if (!admission) {
    send_error(res, at_capacity());
    return false;
  }
  GenerationRequest request;
  request.id = record.id;
  request.prompt_tokens = std::move(prompt).value();
  request.max_new_tokens = max_new_tokens;
  request.sampling = parsed->sampling;
  request.sampling.constraint = std::move(constraint);
  request.stop_strings = parsed->stop;
  request.ignore_eos = parsed->ignore_eos;
  // A call's markers are control tokens in some families' vocabularies.
  request.special_text = parsed->tools.calls_enabled() && !parsed->tools.forced();
  request.timeout = std::chrono::milliseconds(options_.request_timeout_ms);
  request.queue_timeout = std::chrono::milliseconds(options_.queue_timeout_ms);
  const SessionLimits session_limits{request.queue_timeout, request.timeout};
  auto handle = model->engines().submit(std::move(request));
  if (!handle) {
    admission.reset();
    send_error(res, submit_refused(handle.status()));
    return false;
  }

  ResponseIdentity identity{record.id, unix_seconds(), model->name()};
  std::unique_ptr<ResponseFormat> format;
  switch (route.id) {
    case RouteId::kChatCompletions:
      format = make_chat_completion_format(
          std::move(identity), parsed->include_usage, parsed->sampling.logprobs,
          ToolOutput::make(parsed->tools, model->tool_support().syntax));
      break;
    case RouteId::kCompletions:
      format = make_completion_format(std::move(identity), parsed->include_usage,
                                      parsed->sampling.logprobs);
      break;
    default: format = make_simple_chat_format(std::move(identity)); break;
  }
  // From here on the session owns the record and finishes it when it is destroyed.
  GenerationSession session(*this, std::move(handle).value(), exchange, std::move(format),
                            std::move(record), std::move(*admission), active_generations_.acquire(),
                            session_limits);
  // `lease` outlives the session: the model version stays open until its response is done.
  if (!session.wait_first_event()) return true;  // the client left
  const GenerationEvent& first = session.first_event();
  // A stream that ends before any output with an error is answered as a plain HTTP error.
  const bool answer_plainly = !parsed->stream || (first.kind == GenerationEvent::Kind::kFinish &&
                                                  session.failure(first).has_value());
  if (answer_plainly) {
    session.respond();
  } else {
    session.stream();
  }
  return true;
}

}  // namespace llamaserve::server
