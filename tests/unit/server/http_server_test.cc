// The HTTP layer without a model: auth, routing errors, limits, readiness, draining, CORS and
// metrics, through a real cpp-httplib client on a loopback port. Generation routes are
// covered end to end in tests/e2e.
#include "server/http_server.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include <gtest/gtest.h>

namespace llamaserve::server {
namespace {

using nlohmann::json;

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override { spdlog::set_level(spdlog::level::warn); }

  // The server section of `options`; the model is "tiny" on `device`, one running sequence.
  void start(ServerConfig options, const std::string& device = "cpu") {
    ServiceConfig config;
    config.server = std::move(options);
    config.server.port = 0;
    config.server.http_threads = 8;
    config.server.max_queue = 1;
    ModelSpec& model = config.models.emplace_back();
    model.name = "tiny";
    model.engine.max_running = 1;
    model.layout.device = device;
    server_ = std::make_unique<HttpServer>(config);
    ASSERT_TRUE(server_->bind().is_ok());
    server_->start();
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
  }

  void TearDown() override {
    if (server_) server_->stop();
  }

  static json error_of(const httplib::Result& result) {
    EXPECT_TRUE(result);
    auto body = json::parse(result->body, nullptr, false);
    EXPECT_TRUE(body.is_object() && body.contains("error")) << result->body;
    return body.is_object() && body.contains("error") ? body["error"] : json();
  }

  std::unique_ptr<HttpServer> server_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(HttpServerTest, HealthIsOpenReadyWaitsForTheModel) {
  start({});
  auto health = client_->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(json::parse(health->body)["status"], "ok");
  auto ready = client_->Get("/ready");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 503);
  EXPECT_EQ(error_of(ready)["code"], "loading");
  auto chat = client_->Post("/v1/chat/completions", R"({"messages":[]})", "application/json");
  ASSERT_TRUE(chat);
  EXPECT_EQ(chat->status, 503);
  EXPECT_EQ(chat->get_header_value("Retry-After"), "1");
  auto embeddings = client_->Post("/v1/embeddings", R"({"input":"a"})", "application/json");
  ASSERT_TRUE(embeddings);
  EXPECT_EQ(embeddings->status, 503);
  EXPECT_EQ(error_of(embeddings)["code"], "loading");
  EXPECT_EQ(embeddings->get_header_value("Retry-After"), "1");
}

TEST_F(HttpServerTest, BearerAuthOnEverythingButHealth) {
  ServerConfig options;
  options.api_keys = {"secret-1", "secret-2"};
  start(options);
  EXPECT_EQ(client_->Get("/health")->status, 200);
  for (const char* path : {"/v1/models", "/ready", "/metrics", "/openapi.json"}) {
    auto missing = client_->Get(path);
    ASSERT_TRUE(missing);
    EXPECT_EQ(missing->status, 401) << path;
    EXPECT_EQ(missing->get_header_value("WWW-Authenticate"), "Bearer");
    EXPECT_EQ(error_of(missing)["type"], "authentication_error");
  }
  auto wrong = client_->Get("/v1/models", {{"Authorization", "Bearer secret-3"}});
  EXPECT_EQ(wrong->status, 401);
  auto not_bearer = client_->Get("/v1/models", {{"Authorization", "Basic secret-1"}});
  EXPECT_EQ(not_bearer->status, 401);
  auto post = client_->Post("/v1/completions", {{"Authorization", "Bearer nope"}},
                            R"({"prompt":"x"})", "application/json");
  EXPECT_EQ(post->status, 401);
  auto right = client_->Get("/v1/models", {{"Authorization", "Bearer secret-2"}});
  ASSERT_TRUE(right);
  EXPECT_EQ(right->status, 200);
  EXPECT_EQ(json::parse(right->body)["data"][0]["id"], "tiny");
}

// The chat page holds no secret: it is served without a key, while the API it calls is not.
TEST_F(HttpServerTest, ChatPageIsServedWithoutAKeyAndWithItsHeaders) {
  ServerConfig options;
  options.api_keys = {"secret-1"};
  start(options);
  auto page = client_->Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_EQ(page->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_EQ(page->get_header_value("X-Content-Type-Options"), "nosniff");
  EXPECT_EQ(page->get_header_value("Cache-Control"), "no-cache");
  const std::string policy = page->get_header_value("Content-Security-Policy");
  EXPECT_NE(policy.find("default-src 'none'"), std::string::npos) << policy;
  EXPECT_NE(policy.find("connect-src 'self'"), std::string::npos) << policy;
  EXPECT_NE(policy.find("script-src 'sha256-"), std::string::npos) << policy;
  EXPECT_NE(policy.find("style-src 'sha256-"), std::string::npos) << policy;
  EXPECT_EQ(policy.find("unsafe-"), std::string::npos) << policy;
  EXPECT_EQ(page->body.rfind("<!doctype html>", 0), 0u);
  EXPECT_NE(page->body.find("/v1/chat/completions"), std::string::npos);
  EXPECT_NE(page->body.find("</html>"), std::string::npos);
  // Nothing is fetched from anywhere but this server.
  EXPECT_EQ(page->body.find("http://"), std::string::npos);
  EXPECT_EQ(page->body.find("https://"), std::string::npos);
  EXPECT_EQ(client_->Get("/v1/models")->status, 401);
  EXPECT_EQ(client_->Get("/v1/models", {{"Authorization", "Bearer secret-1"}})->status, 200);
  EXPECT_EQ(client_->Get("/index.htm")->status, 404);
  // Other methods are refused as on every other GET route.
  auto posted = client_->Post("/", "x", "text/plain");
  ASSERT_TRUE(posted);
  EXPECT_EQ(posted->status, 405);
  EXPECT_EQ(posted->get_header_value("Allow"), "GET, HEAD");
  auto head = client_->Head("/");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_EQ(head->get_header_value("Content-Length"), std::to_string(page->body.size()));
  EXPECT_TRUE(head->body.empty());
}

TEST_F(HttpServerTest, UnknownRouteWrongMethodAndModel) {
  start({});
  auto missing = client_->Get("/v2/nothing");
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(error_of(missing)["code"], "route_not_found");
  auto wrong_method = client_->Get("/v1/chat/completions");
  EXPECT_EQ(wrong_method->status, 405);
  EXPECT_EQ(wrong_method->get_header_value("Allow"), "POST");
  EXPECT_EQ(error_of(wrong_method)["code"], "method_not_allowed");
  auto deleted = client_->Delete("/v1/models");
  EXPECT_EQ(deleted->status, 405);
  httplib::Request trace;
  trace.method = "TRACE";
  trace.path = "/health";
  auto traced = client_->send(trace);
  ASSERT_TRUE(traced);
  EXPECT_EQ(traced->status, 405);
  EXPECT_EQ(traced->get_header_value("Allow"), "GET, HEAD");
  httplib::Request query;
  query.method = "QUERY";  // a method cpp-httplib does not parse
  query.path = "/v1/completions?x=1";
  auto queried = client_->send(query);
  ASSERT_TRUE(queried);
  EXPECT_EQ(queried->status, 405);
  EXPECT_EQ(queried->get_header_value("Allow"), "POST");
  query.path = "/nowhere";
  EXPECT_EQ(client_->send(query)->status, 404);
  auto model = client_->Get("/v1/models/tiny");
  EXPECT_EQ(model->status, 200);
  auto other_model = client_->Get("/v1/models/gpt-4");
  EXPECT_EQ(other_model->status, 404);
  EXPECT_EQ(error_of(other_model)["code"], "model_not_found");
}

TEST_F(HttpServerTest, OversizedBodyIs413AndTheServerKeepsServing) {
  ServerConfig options;
  options.max_body_bytes = 2048;
  start(options);
  auto big = client_->Post("/v1/completions", std::string(10000, 'x'), "application/json");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413);
  EXPECT_EQ(error_of(big)["code"], "request_too_large");
  EXPECT_EQ(client_->Get("/health")->status, 200);
}

// A raw connection to the server, to see what happens to the bytes that follow a request.
class RawConnection {
 public:
  explicit RawConnection(int port) : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    timeval timeout{0, 300000};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  }
  ~RawConnection() { close(fd_); }

  void send_text(const std::string& text) { send(fd_, text.data(), text.size(), MSG_NOSIGNAL); }

  // What arrives within 300 ms of silence; sets closed() when the server closed.
  std::string receive() {
    std::string received;
    char buffer[4096];
    ssize_t n;
    while ((n = recv(fd_, buffer, sizeof(buffer), 0)) > 0) received.append(buffer, n);
    closed_ = n == 0;
    return received;
  }
  bool closed() const { return closed_; }

 private:
  int fd_;
  bool closed_ = false;
};

// HEAD answers with the head GET would get and no body (RFC 9110 9.3.2), so the next response on
// the connection starts right after it; HEAD on a POST route is refused without a body too.
TEST_F(HttpServerTest, HeadGetsTheHeadOfGetAndNoBody) {
  start({});
  const std::string get = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  RawConnection connection(server_->port());
  connection.send_text("HEAD /health HTTP/1.1\r\nHost: x\r\n\r\n" + get);
  std::string received;
  for (int i = 0; i < 20 && received.find("{\"status\":\"ok\"}") == std::string::npos; ++i) {
    received += connection.receive();
  }
  ASSERT_EQ(received.rfind("HTTP/1.1 200", 0), 0u) << received;
  const size_t end_of_head = received.find("\r\n\r\n");
  ASSERT_NE(end_of_head, std::string::npos) << received;
  // The GET's answer follows the HEAD's head at once, and has the length the HEAD announced.
  const size_t second = end_of_head + 4;
  EXPECT_EQ(received.compare(second, 12, "HTTP/1.1 200"), 0) << received;
  const std::string length_field = "Content-Length: ";
  const size_t head_length = received.find(length_field);
  const size_t get_length = received.find(length_field, second);
  ASSERT_TRUE(head_length < second && get_length != std::string::npos) << received;
  EXPECT_EQ(received.substr(head_length, received.find("\r\n", head_length) - head_length),
            received.substr(get_length, received.find("\r\n", get_length) - get_length));
  EXPECT_FALSE(connection.closed());

  connection.send_text("HEAD /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n" + get);
  received.clear();
  for (int i = 0; i < 20 && received.find("{\"status\":\"ok\"}") == std::string::npos; ++i) {
    received += connection.receive();
  }
  ASSERT_EQ(received.rfind("HTTP/1.1 405", 0), 0u) << received;
  EXPECT_NE(received.find("Allow: POST\r\n"), std::string::npos) << received;
  EXPECT_EQ(received.find("method_not_allowed"), std::string::npos) << received;
}

TEST_F(HttpServerTest, BodiesAreReadOrTheConnectionCloses) {
  start({});
  const std::string body = "{\"tokens\": []}";
  const std::string next = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  // A body is a body whatever the method: the request after it is answered on its own.
  {
    RawConnection connection(server_->port());
    connection.send_text("GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 14\r\n\r\n" + body +
                         next);
    std::string received = connection.receive();
    EXPECT_EQ(received.rfind("HTTP/1.1 200", 0), 0u) << received;
    EXPECT_EQ(received.find("Connection: close"), std::string::npos) << received;
    const size_t second = received.find("HTTP/1.1 200", 1);
    ASSERT_NE(second, std::string::npos) << received;
    EXPECT_NE(received.find("{\"status\":\"ok\"}", second), std::string::npos) << received;
    EXPECT_FALSE(connection.closed());
  }
  // A request refused from its head (an unknown method) leaves its body unread, so the
  // connection closes instead of parsing that body as the next request.
  {
    RawConnection connection(server_->port());
    connection.send_text("QUERY /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 14\r\n\r\n");
    std::string received = connection.receive();
    EXPECT_EQ(received.rfind("HTTP/1.1 405", 0), 0u) << received;
    EXPECT_NE(received.find("Connection: close"), std::string::npos) << received;
    connection.send_text(body + next);
    EXPECT_EQ(connection.receive(), "");
    EXPECT_TRUE(connection.closed());
  }
  // A POST body is read, so the connection stays usable.
  {
    RawConnection connection(server_->port());
    connection.send_text("POST /detokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 14\r\n\r\n" +
                         body);
    std::string received = connection.receive();
    EXPECT_EQ(received.rfind("HTTP/1.1 503", 0), 0u) << received;  // no model loaded
    connection.send_text(next);
    received = connection.receive();
    EXPECT_EQ(received.rfind("HTTP/1.1 200", 0), 0u) << received;
    EXPECT_FALSE(connection.closed());
  }
}

// The admin routes answer a wrong method as the public ones do: 405 with the method they take.
TEST_F(HttpServerTest, AdminRoutesRefuseAWrongMethodWith405) {
  ServerConfig options;
  options.admin_api_keys = {"admin-key"};
  start(options);
  auto reload = client_->Get("/admin/models/a/reload");
  ASSERT_TRUE(reload);
  EXPECT_EQ(reload->status, 405);
  EXPECT_EQ(reload->get_header_value("Allow"), "POST");
  EXPECT_EQ(error_of(reload)["code"], "method_not_allowed");
  auto list = client_->Post("/admin/models", "", "application/json");
  ASSERT_TRUE(list);
  EXPECT_EQ(list->status, 405);
  EXPECT_EQ(list->get_header_value("Allow"), "GET, HEAD");
  EXPECT_EQ(client_->Post("/admin/models/a/explode", "", "application/json")->status, 404);
  EXPECT_EQ(client_->Get("/admin/models")->status, 401);  // the right method: on to the key
}

// A request that fails to parse names the field in `param`.
TEST_F(HttpServerTest, ParseErrorsNameTheirField) {
  start({});
  for (const std::string body : {R"({"tokens": [-1]})", R"({"tokens": "x"})"}) {
    auto refused = client_->Post("/detokenize", body, "application/json");
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->status, 400) << body;
    EXPECT_EQ(error_of(refused)["param"], "tokens") << refused->body;
  }
  auto malformed = client_->Post("/detokenize", "{", "application/json");
  ASSERT_TRUE(malformed);
  EXPECT_EQ(malformed->status, 400);
  EXPECT_TRUE(error_of(malformed)["param"].is_null()) << malformed->body;
}

TEST_F(HttpServerTest, DrainingRefusesNewRequests) {
  start({});
  server_->begin_drain();
  EXPECT_EQ(client_->Get("/health")->status, 200);
  auto ready = client_->Get("/ready");
  EXPECT_EQ(ready->status, 503);
  EXPECT_EQ(error_of(ready)["code"], "draining");
  auto models = client_->Get("/v1/models");
  EXPECT_EQ(models->status, 503);
  EXPECT_EQ(error_of(models)["code"], "draining");
  EXPECT_EQ(models->get_header_value("Connection"), "close");
  EXPECT_EQ(client_->Get("/metrics")->status, 200);
  EXPECT_TRUE(server_->wait_until_idle(std::chrono::milliseconds(10)));
}

TEST_F(HttpServerTest, CorsOnlyWhenConfigured) {
  start({});
  auto plain = client_->Get("/health");
  EXPECT_FALSE(plain->has_header("Access-Control-Allow-Origin"));
  auto preflight = client_->Options("/v1/chat/completions");
  ASSERT_TRUE(preflight);
  EXPECT_EQ(preflight->status, 405);
}

TEST_F(HttpServerTest, CorsPreflightAndHeaders) {
  ServerConfig options;
  options.cors_origin = "https://app.example";
  options.api_keys = {"k"};
  start(options);
  auto preflight = client_->Options("/v1/chat/completions");
  ASSERT_TRUE(preflight);
  EXPECT_EQ(preflight->status, 204);
  EXPECT_EQ(preflight->get_header_value("Access-Control-Allow-Origin"), "https://app.example");
  EXPECT_NE(preflight->get_header_value("Access-Control-Allow-Headers").find("Authorization"),
            std::string::npos);
  auto denied = client_->Get("/v1/models");
  EXPECT_EQ(denied->status, 401);
  EXPECT_EQ(denied->get_header_value("Access-Control-Allow-Origin"), "https://app.example");
}

TEST_F(HttpServerTest, MetricsCountRequestsByEndpointAndStatus) {
  start({});
  client_->Get("/health");
  client_->Get("/health");
  client_->Get("/nowhere");
  client_->Get("/v1/chat/completions");
  auto metrics = client_->Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_NE(metrics->get_header_value("Content-Type").find("text/plain"), std::string::npos);
  const std::string& text = metrics->body;
  EXPECT_NE(text.find("llamaserve_requests_total{endpoint=\"/health\",status=\"200\"} 2"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("llamaserve_requests_total{endpoint=\"other\",status=\"404\"} 1"),
            std::string::npos);
  EXPECT_NE(
      text.find("llamaserve_requests_total{endpoint=\"/v1/chat/completions\",status=\"405\"} 1"),
      std::string::npos);
  for (const char* name : {"llamaserve_queue_length", "llamaserve_running_sequences",
                           "llamaserve_kv_blocks_used", "llamaserve_kv_blocks_free",
                           "llamaserve_preemptions_total", "llamaserve_prompt_tokens_total",
                           "llamaserve_generated_tokens_total", "llamaserve_ready 0"}) {
    EXPECT_NE(text.find(name), std::string::npos) << name;
  }
  // The latency histograms are per model: no series before a model's first generation
  // (tests/e2e/test_models.py checks them).
  EXPECT_EQ(text.find("llamaserve_time_to_first_token_seconds"), std::string::npos);
}

// GPU series come from NVML for the CUDA devices of --devices. Without NVML (a machine
// without a GPU driver) they are left out, not reported as zeros; with it, device 0 is there.
TEST_F(HttpServerTest, GpuMetricsOnlyWhereNvmlReadsThem) {
  start({}, "0");
  auto metrics = client_->Get("/metrics");
  ASSERT_TRUE(metrics);
  ASSERT_EQ(metrics->status, 200);
  if (GpuMetrics::open({0})->available()) {
    EXPECT_NE(metrics->body.find("llamaserve_gpu_memory_used_bytes{device=\"0\"}"),
              std::string::npos)
        << metrics->body;
    EXPECT_NE(metrics->body.find("llamaserve_gpu_memory_total_bytes{device=\"0\"}"),
              std::string::npos);
  } else {
    // NVML's series; the pools' bytes (llamaserve_gpu_pool_bytes) come from the executors.
    for (const char* name :
         {"llamaserve_gpu_memory_", "llamaserve_gpu_utilization_", "llamaserve_gpu_temperature_"}) {
      EXPECT_EQ(metrics->body.find(name), std::string::npos) << name << "\n" << metrics->body;
    }
  }
}

TEST_F(HttpServerTest, NoGpuMetricsOnTheCpu) {
  start({});
  auto metrics = client_->Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->body.find("llamaserve_gpu_"), std::string::npos) << metrics->body;
  // No model yet: the totals are there, no replica has reported.
  EXPECT_NE(metrics->body.find("llamaserve_running_sequences 0"), std::string::npos);
  EXPECT_EQ(metrics->body.find("{replica="), std::string::npos);
}

TEST_F(HttpServerTest, OpenApiDocumentIsServed) {
  start({});
  auto doc = client_->Get("/openapi.json");
  ASSERT_TRUE(doc);
  EXPECT_EQ(doc->status, 200);
  auto parsed = json::parse(doc->body);
  EXPECT_EQ(parsed["openapi"], "3.0.3");
  EXPECT_TRUE(parsed["paths"].contains("/v1/chat/completions"));
}

}  // namespace
}  // namespace llamaserve::server
