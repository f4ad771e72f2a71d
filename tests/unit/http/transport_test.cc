// The transport on a loopback port with a small handler and raw client sockets: ordering of
// pipelined requests, refusals before the body, timeouts, half-closed and vanished clients,
// back-pressure on a stream, HTTP/1.0 and shutdown with a stream under way.
#include "http/transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

namespace llamaserve::http {
namespace {

using namespace std::chrono_literals;

// /echo answers its body; /stream writes `n` chunks of 1 KiB (query "?n=..."); /wait waits
// for its client to go away (or 10 s) without answering; /secret is refused from its head.
class TestHandler : public Handler {
 public:
  std::optional<Response> check_head(const Request& head) override {
    if (head.path != "/secret") return std::nullopt;
    Response response;
    response.status = 401;
    response.body = "no";
    return response;
  }

  void handle(std::shared_ptr<Exchange> exchange) override {
    const Request& request = exchange->request();
    if (request.path == "/stream") {
      const int chunks = std::stoi(request.target.substr(request.target.find('=') + 1));
      Response head;
      head.set_header("Content-Type", "text/plain");
      exchange->start_stream(std::move(head));
      for (int i = 0; i < chunks; ++i) {
        if (!exchange->write(std::string(1024, static_cast<char>('a' + i % 26)))) {
          stream_cut = true;
          return;
        }
        ++chunks_written;
      }
      exchange->end_stream();
      return;
    }
    if (request.path == "/wait") {
      const auto deadline = std::chrono::steady_clock::now() + 10s;
      while (std::chrono::steady_clock::now() < deadline) {
        if (exchange->client_gone()) {
          saw_client_gone = true;
          return;
        }
        std::this_thread::sleep_for(10ms);
        if (request.target == "/wait?answer" && ++waits > 20) break;
      }
      Response response;
      response.body = "waited";
      exchange->respond(std::move(response));
      return;
    }
    Response response;
    response.body = request.method + " " + request.target + " " + request.body;
    exchange->respond(std::move(response));
  }

  Response refusal(const HttpError& error, const Request&) override {
    Response response;
    response.status = error.status;
    response.body = error.message;
    return response;
  }

  std::atomic<int> chunks_written{0};
  std::atomic<bool> stream_cut{false};
  std::atomic<bool> saw_client_gone{false};
  int waits = 0;
};

class Client {
 public:
  explicit Client(int port, int receive_buffer = 0) : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    if (receive_buffer > 0) {
      setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof(receive_buffer));
    }
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  }
  ~Client() {
    if (fd_ >= 0) close(fd_);
  }

  void send_text(const std::string& text) {
    ASSERT_EQ(send(fd_, text.data(), text.size(), MSG_NOSIGNAL), static_cast<ssize_t>(text.size()));
  }
  void shutdown_sending() { shutdown(fd_, SHUT_WR); }
  // Closes with a reset (SO_LINGER 0).
  void reset() {
    linger option{1, 0};
    setsockopt(fd_, SOL_SOCKET, SO_LINGER, &option, sizeof(option));
    close(fd_);
    fd_ = -1;
  }
  void close_now() {
    close(fd_);
    fd_ = -1;
  }

  // Reads until `done(received)` or the server closes or `timeout` passes.
  template <typename Done>
  std::string receive_until(Done done, std::chrono::milliseconds timeout = 5000ms) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done(received_) && !closed_) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left <= 0ms) break;
      pollfd descriptor{fd_, POLLIN, 0};
      if (poll(&descriptor, 1, static_cast<int>(left.count())) <= 0) break;
      char buffer[65536];
      const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0) {
        closed_ = true;
        break;
      }
      received_.append(buffer, static_cast<size_t>(n));
    }
    return received_;
  }
  std::string receive_all(std::chrono::milliseconds timeout = 5000ms) {
    return receive_until([](const std::string&) { return false; }, timeout);
  }
  // Counts complete responses by their status lines and bodies ending.
  std::string receive_responses(int count) {
    return receive_until([count](const std::string& text) {
      int seen = 0;
      for (size_t at = text.find("HTTP/1.1 "); at != std::string::npos;
           at = text.find("HTTP/1.1 ", at + 1)) {
        ++seen;
      }
      return seen >= count;
    });
  }
  bool closed() const { return closed_; }

 private:
  int fd_;
  std::string received_;
  bool closed_ = false;
};

class TransportTest : public ::testing::Test {
 protected:
  void start(ConnectionLimits limits = {}) {
    transport_ = std::make_unique<Transport>(limits, 4, handler_);
    ASSERT_TRUE(transport_->listen("127.0.0.1", 0).is_ok());
    transport_->start();
  }
  void TearDown() override {
    if (transport_) transport_->stop();
  }
  int port() const { return transport_->port(); }

  TestHandler handler_;
  std::unique_ptr<Transport> transport_;
};

int count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST_F(TransportTest, PipelinedRequestsAreAnsweredInOrder) {
  start();
  Client client(port());
  std::string requests;
  for (int i = 0; i < 10; ++i) {
    const std::string body = "body" + std::to_string(i);
    requests += "POST /echo?" + std::to_string(i) +
                " HTTP/1.1\r\nHost: a\r\nContent-Length: " + std::to_string(body.size()) +
                "\r\n\r\n" + body;
  }
  client.send_text(requests);
  const std::string received = client.receive_until(
      [](const std::string& text) { return text.find("/echo?9 body9") != std::string::npos; });
  size_t at = 0;
  for (int i = 0; i < 10; ++i) {
    const std::string expected = "POST /echo?" + std::to_string(i) + " body" + std::to_string(i);
    const size_t found = received.find(expected, at);
    ASSERT_NE(found, std::string::npos) << i << "\n" << received;
    at = found;
  }
  EXPECT_EQ(count(received, "HTTP/1.1 200 OK"), 10);
  EXPECT_FALSE(client.closed());
}

TEST_F(TransportTest, RefusedHeadClosesWithoutReadingTheBody) {
  start();
  Client client(port());
  client.send_text("POST /secret HTTP/1.1\r\nHost: a\r\nContent-Length: 1000000000\r\n\r\n");
  const std::string received = client.receive_until(
      [](const std::string& text) { return text.find("\r\n\r\nno") != std::string::npos; });
  EXPECT_EQ(received.rfind("HTTP/1.1 401", 0), 0u) << received;
  EXPECT_NE(received.find("Connection: close"), std::string::npos);
  client.receive_all(3000ms);
  EXPECT_TRUE(client.closed());
}

TEST_F(TransportTest, ParseErrorsAndTimeoutsAnswerAndClose) {
  ConnectionLimits limits;
  limits.header_timeout = 200ms;
  limits.body_timeout = 200ms;
  limits.idle_timeout = 300ms;
  start(limits);
  {
    Client client(port());
    client.send_text("GET /echo HTTP/1.1\r\nHost");  // never finished
    const std::string received = client.receive_all(2000ms);
    EXPECT_EQ(received.rfind("HTTP/1.1 408", 0), 0u) << received;
    EXPECT_TRUE(client.closed());
  }
  {
    Client client(port());
    client.send_text("POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nabc");
    const std::string received = client.receive_all(2000ms);
    EXPECT_EQ(received.rfind("HTTP/1.1 408", 0), 0u) << received;
    EXPECT_TRUE(client.closed());
  }
  {
    Client client(port());  // idle: closed without a word
    EXPECT_EQ(client.receive_all(2000ms), "");
    EXPECT_TRUE(client.closed());
  }
  {
    Client client(port());
    client.send_text(
        "GET /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n");
    const std::string received = client.receive_all(2000ms);
    EXPECT_EQ(received.rfind("HTTP/1.1 400", 0), 0u) << received;
    EXPECT_TRUE(client.closed());
  }
}

TEST_F(TransportTest, HalfClosedClientGetsItsAnswer) {
  start();
  Client client(port());
  client.send_text("GET /wait?answer HTTP/1.1\r\nHost: a\r\n\r\n");
  client.shutdown_sending();
  const std::string received = client.receive_all(5000ms);
  // The transport asked with an interim response whether the client is still there.
  EXPECT_EQ(received.rfind("HTTP/1.1 102 Processing\r\n\r\n", 0), 0u) << received;
  EXPECT_NE(received.find("HTTP/1.1 200 OK"), std::string::npos) << received;
  EXPECT_NE(received.find("waited"), std::string::npos) << received;
  EXPECT_TRUE(client.closed());
  EXPECT_FALSE(handler_.saw_client_gone);
}

TEST_F(TransportTest, ClosedOrResetClientIsSeenGone) {
  start();
  for (bool reset : {false, true}) {
    handler_.saw_client_gone = false;
    Client client(port());
    client.send_text("GET /wait HTTP/1.1\r\nHost: a\r\n\r\n");
    std::this_thread::sleep_for(50ms);
    if (reset) {
      client.reset();
    } else {
      client.close_now();
    }
    const auto deadline = std::chrono::steady_clock::now() + 3s;
    while (!handler_.saw_client_gone && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(10ms);
    }
    EXPECT_TRUE(handler_.saw_client_gone) << (reset ? "reset" : "close");
  }
}

TEST_F(TransportTest, SlowReaderHoldsTheProducerNotMemory) {
  ConnectionLimits limits;
  limits.max_queued_response_bytes = 16 << 10;
  limits.write_timeout = 1000ms;
  start(limits);
  Client client(port(), 4096);
  client.send_text("GET /stream?n=100000 HTTP/1.1\r\nHost: a\r\n\r\n");  // 100 MB if unbounded
  std::this_thread::sleep_for(500ms);
  // What was produced fits the queue and the socket buffers, not the whole stream.
  EXPECT_LT(handler_.chunks_written.load(), 8000);
  // Nobody reads: the write timeout closes the connection and the producer stops.
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!handler_.stream_cut && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(handler_.stream_cut);
}

TEST_F(TransportTest, StreamsAreChunkedOrCloseDelimited) {
  start();
  {
    Client client(port());
    client.send_text("GET /stream?n=3 HTTP/1.1\r\nHost: a\r\n\r\n");
    const std::string received = client.receive_until(
        [](const std::string& text) { return text.find("\r\n0\r\n\r\n") != std::string::npos; });
    EXPECT_NE(received.find("Transfer-Encoding: chunked"), std::string::npos) << received;
    EXPECT_EQ(count(received, "400\r\n"), 3);
    EXPECT_FALSE(client.closed());
  }
  {
    Client client(port());
    client.send_text("GET /stream?n=3 HTTP/1.0\r\n\r\n");
    const std::string received = client.receive_all();
    EXPECT_TRUE(client.closed());
    EXPECT_EQ(received.find("Transfer-Encoding"), std::string::npos) << received;
    EXPECT_NE(received.find("Connection: close"), std::string::npos);
    const size_t body = received.find("\r\n\r\n") + 4;
    EXPECT_EQ(received.size() - body, 3u * 1024);
  }
}

TEST_F(TransportTest, ExpectContinueIsAnsweredBeforeTheBody) {
  start();
  Client client(port());
  client.send_text(
      "POST /echo HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n");
  std::string received = client.receive_until([](const std::string& text) {
    return text.find("100 Continue\r\n\r\n") != std::string::npos;
  });
  EXPECT_EQ(received, "HTTP/1.1 100 Continue\r\n\r\n");
  client.send_text("hi");
  received = client.receive_until(
      [](const std::string& text) { return text.find("POST /echo hi") != std::string::npos; });
  EXPECT_NE(received.find("HTTP/1.1 200 OK"), std::string::npos) << received;
}

TEST_F(TransportTest, ConnectionsOverTheLimitAreClosed) {
  ConnectionLimits limits;
  limits.max_connections = 2;
  start(limits);
  Client first(port()), second(port());
  const auto deadline = std::chrono::steady_clock::now() + 2s;
  while (transport_->open_connections() < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  Client third(port());
  EXPECT_EQ(third.receive_all(2000ms), "");
  EXPECT_TRUE(third.closed());
  first.send_text("GET /echo HTTP/1.1\r\nHost: a\r\n\r\n");
  EXPECT_NE(first.receive_responses(1).find("200 OK"), std::string::npos);
}

TEST_F(TransportTest, StopLetsAFinishedResponseReachItsClient) {
  start();
  Client client(port(), 4096);
  client.send_text("GET /stream?n=200 HTTP/1.1\r\nHost: a\r\n\r\n");  // 200 KiB, all queued
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (handler_.chunks_written < 200 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  std::thread stopper([this] { transport_->stop(); });
  const std::string received = client.receive_all();
  stopper.join();
  EXPECT_NE(received.find("\r\n0\r\n\r\n"), std::string::npos) << received.size();
  EXPECT_EQ(count(received, "400\r\n"), 200);
}

TEST_F(TransportTest, StopCutsAStreamAndReturns) {
  start();
  Client client(port(), 4096);
  client.send_text("GET /stream?n=100000 HTTP/1.1\r\nHost: a\r\n\r\n");
  std::this_thread::sleep_for(200ms);
  const auto began = std::chrono::steady_clock::now();
  transport_->stop();
  EXPECT_LT(std::chrono::steady_clock::now() - began, 2s);
  EXPECT_TRUE(handler_.stream_cut);
}

}  // namespace
}  // namespace llamaserve::http
