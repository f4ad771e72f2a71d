#include "loadtest/client.h"

#include <boost/asio/connect.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

namespace llamaserve::loadtest {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace {

// Body bytes read per socket read: an event of a streamed token is ~200 bytes.
constexpr size_t kBodyBufferBytes = 8192;

}  // namespace

Result<ServerUrl> parse_server_url(const std::string& url) {
  constexpr std::string_view kScheme = "http://";
  if (url.rfind(kScheme, 0) != 0) {
    return make_error(StatusCode::kInvalidArgument,
                      "--url '{}': expected http://HOST[:PORT][/PATH] (https is not supported)",
                      url);
  }
  ServerUrl out;
  std::string rest = url.substr(kScheme.size());
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    out.base_path = rest.substr(slash);
    rest.resize(slash);
    while (!out.base_path.empty() && out.base_path.back() == '/') out.base_path.pop_back();
  }
  out.host_header = rest;
  const size_t colon = rest.rfind(':');
  const size_t bracket = rest.rfind(']');
  if (colon != std::string::npos && (bracket == std::string::npos || colon > bracket)) {
    out.port = rest.substr(colon + 1);
    rest.resize(colon);
  }
  if (rest.size() >= 2 && rest.front() == '[' && rest.back() == ']') {
    rest = rest.substr(1, rest.size() - 2);  // [::1]
  }
  if (rest.empty() || out.port.empty() ||
      out.port.find_first_not_of("0123456789") != std::string::npos) {
    return make_error(StatusCode::kInvalidArgument, "--url '{}': no host or a bad port", url);
  }
  out.host = rest;
  return out;
}

Connection::Connection(asio::io_context& io, const tcp::resolver::results_type& endpoints,
                       const ServerUrl& url, std::string authorization)
    : endpoints_(endpoints),
      url_(url),
      authorization_(std::move(authorization)),
      socket_(io),
      timer_(io),
      body_buffer_(kBodyBufferBytes) {}

void Connection::start(HttpCall call, Clock::time_point sent, Done done) {
  call_ = std::move(call);
  done_ = std::move(done);
  record_ = RequestRecord{};
  record_.sent = sent;
  sse_ = SseParser{};
  events_.clear();
  stream_error_.clear();
  retried_ = false;
  timed_out_ = false;
  const uint64_t generation = ++generation_;

  request_ = {};
  request_.method(http::string_to_verb(call_.method));
  request_.target(url_.base_path + call_.target);
  request_.version(11);
  request_.set(http::field::host, url_.host_header);
  request_.set(http::field::user_agent, "llamaserve-loadtest");
  if (call_.streaming) request_.set(http::field::accept, "text/event-stream");
  if (!authorization_.empty()) request_.set(http::field::authorization, authorization_);
  if (!call_.body.empty()) {
    request_.set(http::field::content_type, "application/json");
    request_.body() = call_.body;
  }
  request_.keep_alive(true);
  request_.prepare_payload();

  timer_.expires_at(sent + call_.timeout);
  timer_.async_wait([self = shared_from_this(), generation](error_code ec) {
    if (ec || self->generation_ != generation) return;
    self->timed_out_ = true;
    self->close_socket();  // the pending operation ends with an error: the call fails
  });
  if (socket_.is_open() && reusable_) {
    fresh_ = false;
    send();
  } else {
    connect();
  }
}

void Connection::connect() {
  close_socket();
  buffer_.clear();
  fresh_ = true;
  asio::async_connect(
      socket_, endpoints_, [self = shared_from_this()](error_code ec, const tcp::endpoint&) {
        if (ec) {
          return self->fail(self->timed_out_ ? Outcome::kTimeout : Outcome::kConnectError,
                            "connect: " + ec.message());
        }
        error_code ignored;
        self->socket_.set_option(tcp::no_delay(true), ignored);
        self->send();
      });
}

void Connection::send() {
  parser_.emplace();
  parser_->body_limit(boost::none);  // a stream is as long as its tokens
  http::async_write(socket_, request_, [self = shared_from_this()](error_code ec, size_t) {
    if (ec) return self->on_early_error(ec, Outcome::kConnectionLost);
    self->read_head();
  });
}

void Connection::read_head() {
  http::async_read_header(socket_, buffer_, *parser_,
                          [self = shared_from_this()](error_code ec, size_t) {
                            if (ec) return self->on_early_error(ec, Outcome::kConnectionLost);
                            self->record_.http_status = self->parser_->get().result_int();
                            if (self->parser_->is_done()) return self->complete();
                            self->read_body();
                          });
}

void Connection::read_body() {
  http::buffer_body::value_type& body = parser_->get().body();
  body.data = body_buffer_.data();
  body.size = body_buffer_.size();
  http::async_read_some(socket_, buffer_, *parser_,
                        [self = shared_from_this()](error_code ec, size_t) {
                          // The time of the bytes: taken before they are parsed.
                          self->on_body(ec, Clock::now());
                        });
}

void Connection::on_body(error_code ec, Clock::time_point now) {
  if (ec == http::error::need_buffer) ec = {};
  const size_t got = body_buffer_.size() - parser_->get().body().size;
  if (got > 0) consume(std::string_view(body_buffer_.data(), got), now);
  if (ec) {
    return fail(timed_out_ ? Outcome::kTimeout : Outcome::kConnectionLost,
                "reading the answer: " + ec.message());
  }
  if (parser_->is_done()) return complete();
  read_body();
}

void Connection::consume(std::string_view bytes, Clock::time_point now) {
  if (record_.http_status != 200 || !call_.streaming) {
    const size_t room =
        call_.keep_body_bytes - std::min(call_.keep_body_bytes, record_.body.size());
    record_.body.append(bytes.substr(0, room));
    return;
  }
  if (!stream_error_.empty()) return;  // the stream is already failed; drain it
  if (Status fed = sse_.feed(bytes, events_); !fed.is_ok()) {
    stream_error_ = fed.message();
    return;
  }
  for (const SseEvent& event : events_) {
    const StreamChunk chunk = read_stream_chunk(event.data);
    if (!chunk.error.empty()) {
      stream_error_ = chunk.error;
      break;
    }
    if (chunk.content) {
      if (record_.content_events == 0) {
        record_.first_content = now;
      } else {
        record_.event_gaps_ms.push_back(static_cast<float>(
            std::chrono::duration<double, std::milli>(now - record_.last_content).count()));
      }
      record_.last_content = now;
      ++record_.content_events;
    }
    if (chunk.completion_tokens >= 0) record_.usage_completion_tokens = chunk.completion_tokens;
    if (chunk.prompt_tokens >= 0) record_.usage_prompt_tokens = chunk.prompt_tokens;
  }
  events_.clear();
}

void Connection::on_early_error(error_code ec, Outcome outcome) {
  // A reused connection the server had closed: nothing of this call reached it.
  if (!timed_out_ && !fresh_ && !retried_ && record_.http_status == 0) {
    retried_ = true;
    return connect();
  }
  fail(timed_out_ ? Outcome::kTimeout : outcome, ec.message());
}

void Connection::fail(Outcome outcome, std::string message) {
  record_.outcome = outcome;
  if (record_.error.empty()) record_.error = std::move(message);
  record_.end = Clock::now();
  reusable_ = false;
  close_socket();
  finish();
}

void Connection::complete() {
  record_.end = Clock::now();
  reusable_ = parser_->keep_alive();
  if (record_.http_status != 200) {
    record_.outcome = Outcome::kHttpStatus;
    record_.error = record_.body;
  } else if (!stream_error_.empty()) {
    record_.outcome = Outcome::kStreamError;
    record_.error = stream_error_;
  } else {
    record_.outcome = Outcome::kOk;
  }
  if (!reusable_) close_socket();
  finish();
}

void Connection::finish() {
  ++generation_;
  timer_.cancel();
  // `done_` may start the next call on this connection: nothing of this one is used after.
  Done done = std::move(done_);
  done(std::move(record_));
}

void Connection::close_socket() {
  if (!socket_.is_open()) return;
  error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
}

}  // namespace llamaserve::loadtest
