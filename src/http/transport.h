// The HTTP/1.1 transport: one event-loop thread (epoll, through Boost.Asio) owns every socket,
// so an idle or slow connection costs a socket and its buffers, never a thread. Requests are
// read with RequestReader under ConnectionLimits; complete requests go to a pool of worker
// threads, which answer through an Exchange from any thread.
//
// Per connection, requests are answered one at a time and in order (pipelined requests wait
// in the socket's buffers, unread, while one is being answered). A connection whose request
// stream can no longer be trusted (a parse error, a limit crossed, a request refused before its
// body was read) is answered with "Connection: close" and closed; the close lingers briefly,
// discarding what the client still sends, so that the answer is not lost to a reset.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "http/limits.h"
#include "http/message.h"
#include "http/request_reader.h"

namespace llamaserve::http {

class Connection;

// One request and its response. Thread-safe; the handler may pass it to other threads. Exactly
// one of respond() or start_stream() ... end_stream() answers it; an exchange dropped without
// an answer gets a 500 (or, mid-stream, its connection is cut).
class Exchange {
 public:
  // `keep_alive`: the client lets the connection stay open after the response.
  Exchange(std::shared_ptr<Connection> connection, Request request, bool keep_alive);
  ~Exchange();
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  const Request& request() const { return request_; }

  // A whole response, sent with Content-Length in one write.
  void respond(Response response);

  // A streamed response: chunked in HTTP/1.1, ended by closing the connection in HTTP/1.0.
  // The head waits for the first write(), so that both leave in one packet.
  void start_stream(Response head);
  // Queues bytes; blocks while more than ConnectionLimits::max_queued_response_bytes wait for
  // a slow client. False once the client has gone (stop producing).
  bool write(std::string_view bytes);
  void end_stream();

  // Non-blocking check on the socket: true once the client reset or closed the connection,
  // or the transport cut it. A client that only shut down its sending side (a half-close) is
  // still there: a stream goes on (a write to a closed socket draws a reset, seen on the next
  // check), and a plain response is preceded by an interim "102 Processing" to find out.
  bool client_gone();

 private:
  std::shared_ptr<Connection> connection_;
  const Request request_;
  const bool keep_alive_;
  enum class Phase { kWaiting, kStreaming, kDone } phase_ = Phase::kWaiting;
  std::string stream_head_;  // sent with the first write
  bool stream_chunked_ = true;
  bool stream_close_ = false;
};

class Handler {
 public:
  virtual ~Handler() = default;
  // On the event-loop thread with the head of a request, before any of its body is read; must
  // not block. A response refuses the request (auth, unknown route, draining); nullopt reads
  // the body and hands the request to handle().
  virtual std::optional<Response> check_head(const Request& head) = 0;
  // On a worker thread, with the whole request.
  virtual void handle(std::shared_ptr<Exchange> exchange) = 0;
  // The response to a request the transport refused (malformed, over a limit, too slow);
  // `head` holds what was read of it (possibly nothing). Called on the event-loop thread.
  virtual Response refusal(const HttpError& error, const Request& head) = 0;
};

class Transport {
 public:
  Transport(const ConnectionLimits& limits, int worker_threads, Handler& handler);
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  // Binds and listens (port 0 picks a free one).
  Status listen(const std::string& host, int port);
  int port() const;

  // Runs the event loop on a thread of its own.
  void start();
  // Keep-alive connections waiting for a request are closed, and every later response closes
  // its connection, so that clients reconnect elsewhere; requests under way continue.
  void begin_drain();
  // Stops accepting and closes connections waiting for a request; responses still being
  // written get up to `grace` to reach their clients; then every connection left is cut, the
  // event loop ends and the workers are waited for.
  void stop(std::chrono::milliseconds grace = std::chrono::milliseconds(1000));

  // Connections open now (for metrics and tests).
  int open_connections() const;

  struct State;  // the event loop, the workers and the connections (transport.cc)

 private:
  std::shared_ptr<State> state_;
};

}  // namespace llamaserve::http
