// The HTTP/1.1 client of the load generator: one keep-alive connection that runs one request
// at a time, asynchronously on the caller's io_context (Boost.Asio + Boost.Beast), and times
// every server-sent event as its bytes come off the socket. Included only by runner.cc.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "core/status.h"
#include "loadtest/sse.h"
#include "loadtest/stats.h"

namespace llamaserve::loadtest {

// http://HOST[:PORT][/PATH]; PATH (without a trailing "/") prefixes every request target.
struct ServerUrl {
  std::string host;
  std::string port = "80";
  std::string base_path;
  std::string host_header;  // HOST[:PORT] as the URL wrote it
};
Result<ServerUrl> parse_server_url(const std::string& url);

struct HttpCall {
  std::string method = "POST";
  std::string target;  // after the base path: "/v1/completions"
  std::string body;
  Clock::duration timeout{};
  bool streaming = true;         // read a 200 body as an event stream
  size_t keep_body_bytes = 512;  // bytes of a non-streamed (or non-200) body kept in the record
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  using Done = std::function<void(RequestRecord)>;

  // `endpoints` and `url` must outlive the connection.
  Connection(boost::asio::io_context& io,
             const boost::asio::ip::tcp::resolver::results_type& endpoints, const ServerUrl& url,
             std::string authorization);

  // Runs `call`; `done` is called once, on the io_context's thread, with the record (its
  // `sent` is `sent`). Connects first when the connection is not open; a request on a reused
  // connection that fails before any answer (the server closed it while idle) is sent again
  // once on a new connection. PRECONDITION: no call in progress.
  void start(HttpCall call, Clock::time_point sent, Done done);

 private:
  void connect();
  void send();
  void read_head();
  void read_body();
  void on_body(boost::system::error_code ec, Clock::time_point now);
  void consume(std::string_view bytes, Clock::time_point now);
  void on_early_error(boost::system::error_code ec, Outcome outcome);
  void fail(Outcome outcome, std::string message);
  void complete();
  void finish();
  void close_socket();

  const boost::asio::ip::tcp::resolver::results_type& endpoints_;
  const ServerUrl& url_;
  const std::string authorization_;
  boost::asio::ip::tcp::socket socket_;
  boost::asio::steady_timer timer_;
  boost::beast::flat_buffer buffer_;
  boost::beast::http::request<boost::beast::http::string_body> request_;
  std::optional<boost::beast::http::response_parser<boost::beast::http::buffer_body>> parser_;
  std::vector<char> body_buffer_;

  HttpCall call_;
  Done done_;
  RequestRecord record_;
  SseParser sse_;
  std::vector<SseEvent> events_;
  std::string stream_error_;
  uint64_t generation_ = 0;  // counts calls: a timer of an earlier call must not cut this one
  bool reusable_ = false;    // the last answer left the connection open for another request
  bool fresh_ = false;       // connected for this call
  bool retried_ = false;
  bool timed_out_ = false;
};

}  // namespace llamaserve::loadtest
