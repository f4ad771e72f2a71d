// The HTTP front end: routes, auth, CORS, admission, per-request metrics and logs, readiness
// and draining, on top of the transport of src/http (event loop, strict request reader,
// limits and timeouts per connection).
//
// Threads: the transport's event loop checks each request head here (route, auth, draining)
// before its body is read; complete requests run on its worker pool (--http-threads). A
// generation request holds its worker while it waits and streams, so the pool is larger than
// replicas x max-running + max-queue and requests beyond the engine's limits are still
// answered (429) at once; idle and slow connections hold no thread. Handlers never touch model
// state: they tokenize, submit to the EngineGroup and read events from the RequestHandle.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "engine/engine_group.h"
#include "http/transport.h"
#include "server/api_error.h"
#include "server/gpu_metrics.h"
#include "server/in_flight.h"
#include "server/metrics.h"
#include "server/request_trace.h"
#include "server/routes.h"
#include "service/config.h"
#include "service/model_registry.h"
#include "service/model_service.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace llamaserve::server {

struct ParsedGeneration;

// How often a request waiting on the engine checks that its client is still connected.
inline constexpr std::chrono::milliseconds kLivenessPoll{50};
// The status of a request whose client left before the answer (logged and counted as such).
inline constexpr int kClientClosedStatus = 499;

// What the request log line and the request metrics need, filled in as a request goes.
struct RequestRecord {
  std::string id;           // the server's id: the response's "id" and X-Request-Id
  std::string client_id;    // the client's X-Request-Id, echoed in its place; or ""
  TraceParent traceparent;  // the client's W3C traceparent, echoed; or an empty header
  std::string endpoint;     // route path ("/v1/models/{model}"), or "other" for unknown paths
  std::string model;        // the model a generation used; "" for other requests
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  int status = 0;  // HTTP status sent; 499 = the client went away first
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  double ttft_ms = -1;  // < 0: no token was generated
  std::string finish_reason;
  std::string error;  // message of an error response, for the log
};

class HttpServer final : private http::Handler {
 public:
  // Serves the models of config.models once set_registry() hands them over.
  explicit HttpServer(const ServiceConfig& config);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the listening socket (--host, --port; port 0 picks a free one).
  Status bind();
  int port() const { return port_; }
  // Serves connections on the transport's own threads until stop().
  void start();

  // Opens the generation routes; /ready turns 200 once the registry is ready (every
  // required model loaded and warmed up).
  void set_registry(std::shared_ptr<ModelRegistry> registry);
  // /ready turns 503 and every new request but /health, /ready and /metrics gets 503;
  // requests already admitted continue.
  void begin_drain();
  // Waits until no generation response is being produced, at most `timeout`. True if idle.
  bool wait_until_idle(std::chrono::milliseconds timeout);
  // Closes the listening socket and every connection and waits for the request threads.
  // Responses still streaming are cut, so drain first.
  void stop();
  // Drops the server's reference to the registry.
  void release_models();

  ServerMetrics& metrics() { return metrics_; }

  // For the request log and metrics; public so that generation sessions can finish records.
  void finish_record(RequestRecord& record);
  // Headers every response carries (request id, CORS); public for generation sessions.
  void decorate(http::Response& response, const RequestRecord& record) const;
  // A record of one request: a new id, and the client's identifiers from `head`.
  static RequestRecord new_record(const http::Request& head, std::string_view id_prefix,
                                  std::string endpoint);

 private:
  // http::Handler
  std::optional<http::Response> check_head(const http::Request& head) override;
  void handle(std::shared_ptr<http::Exchange> exchange) override;
  http::Response refusal(const http::HttpError& error, const http::Request& head) override;

  std::optional<ApiError> check_auth(const http::Request& head) const;
  // A refusal decided from the head: counted and logged, with the headers every response has.
  http::Response refuse(const ApiError& error, const http::Request& head,
                        const std::string& endpoint, std::string_view id_prefix);
  // Routes (generation.cc for the generation ones). Each fills `res`; handle_generation may
  // answer through the exchange itself (a stream), and then returns true.
  bool handle_route(const Route& route, http::Exchange& exchange, http::Response& res,
                    RequestRecord& record);
  bool handle_generation(const Route& route, http::Exchange& exchange, http::Response& res,
                         RequestRecord& record);
  // POST /v1/embeddings (embeddings.cc); true when it answered through the exchange itself.
  bool handle_embeddings(http::Exchange& exchange, http::Response& res, RequestRecord& record);
  Result<std::vector<int32_t>> build_prompt(const ModelService& model,
                                            const ParsedGeneration& parsed) const;
  void handle_models(const http::Request& req, http::Response& res, bool single);
  void handle_tokenize(const http::Request& req, http::Response& res);
  void handle_detokenize(const http::Request& req, http::Response& res);
  void handle_ready(http::Response& res);
  void handle_chat_page(http::Response& res);
  void handle_metrics(http::Response& res);

  std::shared_ptr<ModelRegistry> registry() const;
  bool is_ready() const;
  // The body of a request for a model as a JSON object; nullopt once `res` holds the error (no
  // models loaded yet: 503; not a JSON object: 400).
  std::optional<nlohmann::json> model_request_body(const http::Request& req, http::Response& res);
  // A lease on `name` (empty: the default model) for a request, or the error to answer.
  Result<ModelLease> lease_model(const std::string& name);
  // /admin/models...: nullopt when `path` is not an admin route.
  std::optional<http::Response> check_admin_head(const http::Request& head);
  void handle_admin(http::Exchange& exchange, http::Response& res);
  std::string build_openapi_json(int32_t n_vocab) const;

  const ServerConfig options_;
  const std::string model_name_;  // the default model's id, also before it is loaded
  const std::string device_;      // its devices, for the GPU metrics
  // Sequences running at once over the replicas, and requests admitted before 429.
  const int running_limit_;
  const int admission_limit_;
  ServerMetrics metrics_;
  // NVML readings of the CUDA devices of --devices; unavailable on the CPU or without NVML.
  std::unique_ptr<GpuMetrics> gpu_metrics_;
  bool uses_cuda_ = false;  // some model runs on CUDA devices: the pool gauge is exported
  int port_ = 0;

  mutable std::mutex model_mutex_;
  std::shared_ptr<ModelRegistry> registry_;  // guarded by model_mutex_
  // Rebuilt once the model (and so the vocabulary size) is known.
  std::shared_ptr<const std::string> openapi_json_;  // guarded by model_mutex_
  std::atomic<bool> draining_{false};

  // Admission: at most replicas x max-running + max-queue generation requests
  // (ServiceConfig::admission_limit) between submission and their finish event; past that,
  // 429 at once. Each engine's own queue bound is set to that limit so that it never decides
  // instead (it counts requests not yet scheduled, which a burst can fill while running
  // slots are still free).
  std::optional<InFlightCounter::Ticket> try_admit();
  // The 429 of a request that try_admit() turned away.
  ApiError at_capacity() const;
  // What to answer when an engine refuses a submission (its queue is full: 429; it is
  // shutting down: 503; anything else as the status says).
  ApiError submit_refused(const Status& status) const;

  InFlightCounter admitted_;
  InFlightCounter active_generations_;  // sessions still answering: wait_until_idle

  // Last: destroyed (stopped) first, while everything its threads use still exists.
  std::unique_ptr<http::Transport> transport_;
};

// Shared by the HTTP layer and its tests.
void send_error(http::Response& res, const ApiError& error);
// Compares keys without an early exit (the time taken tells only whether the lengths agree).
bool constant_time_equal(std::string_view a, std::string_view b);
// Why a model could not be leased, as the error a request gets (404, or 503 with Retry-After).
ApiError model_unavailable(const Status& status);
void send_json(http::Response& res, int status, const nlohmann::json& body);

}  // namespace llamaserve::server
