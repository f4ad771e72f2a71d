#include "http/transport.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <array>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/write.hpp>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "http/response_head.h"

namespace llamaserve::http {
namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

namespace {

// After a response that closes its connection, what the client still sends is read and
// dropped for this long (or up to this many bytes) before the socket closes: closing with
// unread bytes would send a reset, which can destroy the response before the client reads it.
constexpr std::chrono::milliseconds kLingerTime{2000};
constexpr size_t kLingerBytes = 1 << 20;
constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
constexpr std::string_view kProcessing = "HTTP/1.1 102 Processing\r\n\r\n";

}  // namespace

struct Transport::State {
  State(const ConnectionLimits& connection_limits, int worker_threads, Handler& request_handler)
      : limits(connection_limits),
        handler(request_handler),
        workers(static_cast<size_t>(std::max(1, worker_threads))) {}

  void accept();
  void close_all();

  const ConnectionLimits limits;
  Handler& handler;
  asio::io_context io;
  tcp::acceptor acceptor{io};
  asio::steady_timer accept_retry{io};
  asio::thread_pool workers;
  std::thread loop;
  std::atomic<bool> draining{false};
  std::atomic<bool> stopping{false};
  std::atomic<int> open{0};
  std::unordered_set<std::shared_ptr<Connection>> live;  // event-loop thread only
};

// One client connection. Reading, timers and socket writes happen on the event-loop thread;
// exchanges queue response bytes from worker threads under `mutex_`.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(Transport::State& transport, tcp::socket socket)
      : transport_(&transport),
        socket_(std::move(socket)),
        timer_(transport_->io),
        reader_(transport_->limits.request),
        fd_(socket_.native_handle()) {}

  void start() {
    error_code ignored;
    socket_.set_option(tcp::no_delay(true), ignored);
    arm(Timer::kIdle);
    read();
  }

  // --- Any thread -------------------------------------------------------------------------

  // Queues response bytes. `last`: they end the response; `close`: the connection closes after
  // it. False when the connection is gone.
  bool queue(std::string bytes, bool last, bool close) {
    std::lock_guard lock(mutex_);
    if (closed_) return false;
    pending_ += bytes;
    response_done_ |= last;
    close_after_response_ |= close;
    schedule_flush_locked();
    return true;
  }

  // Blocks while a slow client leaves too many bytes queued. False when the connection is gone.
  bool wait_writable() {
    std::unique_lock lock(mutex_);
    drained_.wait(lock, [&] {
      return closed_ || pending_.size() < transport_->limits.max_queued_response_bytes;
    });
    return !closed_;
  }

  bool client_gone(bool streaming, int request_version) {
    std::lock_guard lock(mutex_);
    if (closed_) return true;
    pollfd descriptor{fd_, POLLIN | POLLRDHUP, 0};
    int ready;
    do {
      ready = poll(&descriptor, 1, 0);
    } while (ready < 0 && errno == EINTR);
    if (ready <= 0) return false;
    if (descriptor.revents & (POLLERR | POLLHUP | POLLNVAL)) {
      cut_locked();
      return true;
    }
    if ((descriptor.revents & POLLRDHUP) && !streaming) {
      // Half-closed or closed: only a write tells which. An HTTP/1.0 client cannot be sent an
      // interim response, so for it a shutdown is taken as leaving.
      if (request_version == 10) {
        cut_locked();
        return true;
      }
      if (!probe_sent_) {
        probe_sent_ = true;
        pending_ += kProcessing;
        schedule_flush_locked();
      }
    }
    return false;
  }

  // Closes the connection from any thread (the client is taken as gone).
  void cut() {
    std::lock_guard lock(mutex_);
    cut_locked();
  }

  // --- Event-loop thread ------------------------------------------------------------------

  void close_now() {
    if (phase_ == Phase::kClosed) return;
    {
      std::lock_guard lock(mutex_);
      closed_ = true;
      error_code ignored;
      socket_.close(ignored);
    }
    drained_.notify_all();
    phase_ = Phase::kClosed;
    disarm();
    transport_->open.fetch_sub(1);
    transport_->live.erase(shared_from_this());
  }

  // Closes a connection waiting for its next request (draining).
  void close_if_idle() {
    if (phase_ == Phase::kReading && in_.empty() && !request_started_) close_now();
  }

 private:
  enum class Phase { kReading, kAnswering, kLingering, kClosed };
  enum class Timer { kIdle, kHeader, kBody, kWrite, kLinger };

  void schedule_flush_locked() {
    if (flush_posted_) return;
    flush_posted_ = true;
    asio::post(transport_->io, [self = shared_from_this()] { self->flush(); });
  }

  void cut_locked() {
    if (closed_) return;
    closed_ = true;  // exchanges see the client as gone at once
    asio::post(transport_->io, [self = shared_from_this()] { self->close_now(); });
    drained_.notify_all();
  }

  void arm(Timer kind) {
    std::chrono::milliseconds duration{0};
    const ConnectionLimits& limits = transport_->limits;
    switch (kind) {
      case Timer::kIdle: duration = limits.idle_timeout; break;
      case Timer::kHeader: duration = limits.header_timeout; break;
      case Timer::kBody: duration = limits.body_timeout; break;
      case Timer::kWrite: duration = limits.write_timeout; break;
      case Timer::kLinger: duration = kLingerTime; break;
    }
    const uint64_t serial = ++timer_serial_;
    timer_.expires_after(duration);
    timer_.async_wait([self = shared_from_this(), serial, kind](const error_code& ec) {
      if (ec || serial != self->timer_serial_ || self->phase_ == Phase::kClosed) return;
      self->on_timeout(kind);
    });
  }

  void disarm() {
    ++timer_serial_;
    timer_.cancel();
  }

  void on_timeout(Timer kind) {
    switch (kind) {
      case Timer::kHeader:
        return refuse({408, "the request head did not arrive in time (--header-timeout-ms)"});
      case Timer::kBody:
        return refuse({408, "the request body did not arrive in time (--body-timeout-ms)"});
      case Timer::kIdle:
      case Timer::kWrite:
      case Timer::kLinger: return close_now();
    }
  }

  void read() {
    if (reading_ || phase_ == Phase::kClosed) return;
    reading_ = true;
    socket_.async_read_some(asio::buffer(read_buffer_),
                            [self = shared_from_this()](const error_code& ec, size_t bytes) {
                              self->on_read(ec, bytes);
                            });
  }

  void on_read(const error_code& ec, size_t bytes) {
    reading_ = false;
    if (phase_ == Phase::kClosed) return;
    if (phase_ == Phase::kLingering) {
      lingered_bytes_ += bytes;
      if (ec || lingered_bytes_ > kLingerBytes) return close_now();
      return read();
    }
    if (ec == asio::error::eof) {
      peer_eof_ = true;
    } else if (ec) {
      return close_now();
    }
    if (bytes > 0 && !request_started_) {
      request_started_ = true;
      arm(Timer::kHeader);
    }
    in_.append(read_buffer_.data(), bytes);
    process_input();
  }

  // Parses what has arrived: refuses, reads on, or hands a complete request to a worker.
  void process_input() {
    while (phase_ == Phase::kReading) {
      in_.erase(0, reader_.parse(in_));
      switch (reader_.state()) {
        case RequestReader::State::kHead:
        case RequestReader::State::kBody:
          if (peer_eof_) return close_now();  // nothing more will come; drop what is partial
          if (!in_.empty() && !request_started_) {
            request_started_ = true;
            arm(Timer::kHeader);
          }
          return read();
        case RequestReader::State::kFailed: return refuse(reader_.error());
        case RequestReader::State::kHeadReady: {
          request_version_ = reader_.head().version;
          head_request_ = is_head_request(reader_.head().method);
          if (auto refusal = transport_->handler.check_head(reader_.head())) {
            // With its body unread, what follows on the connection is not a request.
            answer_from_loop(std::move(*refusal), reader_.has_body() || !reader_.keep_alive());
            return;
          }
          reader_.read_body();
          if (reader_.state() == RequestReader::State::kBody) {
            if (reader_.expects_continue()) queue(std::string(kContinue), false, false);
            arm(Timer::kBody);
          }
          continue;
        }
        case RequestReader::State::kComplete: return dispatch();
      }
    }
  }

  void dispatch() {
    const bool keep_alive = reader_.keep_alive() && !peer_eof_;
    Request request = reader_.take();
    error_code ignored;
    const auto remote = socket_.remote_endpoint(ignored);
    if (!ignored) request.remote_address = remote.address().to_string();
    phase_ = Phase::kAnswering;
    request_started_ = false;
    {
      std::lock_guard lock(mutex_);
      probe_sent_ = false;
    }
    disarm();
    auto exchange = std::make_shared<Exchange>(shared_from_this(), std::move(request), keep_alive);
    Handler& handler = transport_->handler;
    asio::post(transport_->workers, [&handler, exchange = std::move(exchange)]() mutable {
      try {
        handler.handle(exchange);
      } catch (...) {
        // The exchange answers 500 (or cuts a stream) when it is dropped unanswered.
      }
    });
  }

  // A response decided on the event-loop thread (a refusal), which always closes the
  // connection when `close`.
  void answer_from_loop(Response response, bool close) {
    close = close || transport_->draining || asks_to_close(response);
    phase_ = Phase::kAnswering;
    reader_ = RequestReader(transport_->limits.request);
    request_started_ = false;
    disarm();
    std::string bytes =
        serialize_head(response, response.body.size(), Framing::kLength, request_version_, close);
    if (!head_request_) bytes += response.body;
    queue(std::move(bytes), true, close);
  }

  void refuse(const HttpError& error) {
    request_version_ = reader_.head().version;
    head_request_ = is_head_request(reader_.head().method);
    answer_from_loop(transport_->handler.refusal(error, reader_.head()), true);
  }

  void flush() {
    std::unique_lock lock(mutex_);
    flush_posted_ = false;
    if (closed_ || writing_) return;
    if (pending_.empty()) {
      if (!response_done_) return;
      response_done_ = false;
      const bool close = close_after_response_;
      close_after_response_ = false;
      lock.unlock();
      return response_complete(close);
    }
    writing_ = true;
    std::swap(pending_, in_flight_);
    lock.unlock();
    drained_.notify_all();
    arm(Timer::kWrite);
    asio::async_write(
        socket_, asio::buffer(in_flight_),
        [self = shared_from_this()](const error_code& ec, size_t) { self->on_written(ec); });
  }

  void on_written(const error_code& ec) {
    if (phase_ == Phase::kClosed) return;
    if (ec) return close_now();
    {
      std::lock_guard lock(mutex_);
      writing_ = false;
      in_flight_.clear();
    }
    disarm();
    flush();
  }

  void response_complete(bool close) {
    if (phase_ == Phase::kClosed) return;
    if (close || transport_->draining || transport_->stopping) return linger();
    phase_ = Phase::kReading;
    if (in_.empty() && !peer_eof_) {
      arm(Timer::kIdle);
    } else {
      request_started_ = true;
      arm(Timer::kHeader);
    }
    process_input();
  }

  void linger() {
    phase_ = Phase::kLingering;
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    if (peer_eof_ || transport_->stopping) return close_now();
    arm(Timer::kLinger);
    read();
  }

  // Outlives its connections: Transport::stop() waits until the event loop has no work left.
  Transport::State* transport_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  uint64_t timer_serial_ = 0;
  RequestReader reader_;
  std::string in_;  // received, not yet consumed by the reader
  std::array<char, 16384> read_buffer_{};
  bool reading_ = false;
  Phase phase_ = Phase::kReading;
  bool request_started_ = false;  // a byte of the next request has arrived
  bool peer_eof_ = false;
  size_t lingered_bytes_ = 0;
  int request_version_ = 11;   // of the request being read or refused
  bool head_request_ = false;  // likewise: a HEAD request, whose answer has no body

  std::mutex mutex_;
  std::condition_variable drained_;
  const int fd_;                       // for poll(); used only while !closed_
  std::string pending_;                // guarded: queued response bytes
  std::string in_flight_;              // being written (event-loop thread)
  bool writing_ = false;               // guarded
  bool flush_posted_ = false;          // guarded
  bool response_done_ = false;         // guarded: the response's last byte is queued
  bool close_after_response_ = false;  // guarded
  bool closed_ = false;                // guarded: no more writes; the client is gone
  bool probe_sent_ = false;            // guarded
};

// --- Exchange ---------------------------------------------------------------------------------

Exchange::Exchange(std::shared_ptr<Connection> connection, Request request, bool keep_alive)
    : connection_(std::move(connection)), request_(std::move(request)), keep_alive_(keep_alive) {}

Exchange::~Exchange() {
  if (phase_ == Phase::kWaiting) {
    Response failure;
    failure.status = 500;
    failure.set_header("Content-Type", "application/json");
    failure.body = R"({"error":{"message":"internal error","type":"server_error","code":null}})";
    respond(std::move(failure));
  } else if (phase_ == Phase::kStreaming) {
    connection_->cut();  // a stream cut short must not look complete
  }
}

void Exchange::respond(Response response) {
  if (phase_ != Phase::kWaiting) return;
  phase_ = Phase::kDone;
  const bool close = asks_to_close(response) || !keep_alive_;
  std::string bytes =
      serialize_head(response, response.body.size(), Framing::kLength, request_.version, close);
  if (!is_head_request(request_.method)) bytes += response.body;
  connection_->queue(std::move(bytes), true, close);
}

void Exchange::start_stream(Response head) {
  if (phase_ != Phase::kWaiting) return;
  phase_ = Phase::kStreaming;
  const bool http10 = request_.version == 10;
  const bool close = http10 || asks_to_close(head) || !keep_alive_;
  stream_head_ = serialize_head(head, 0, http10 ? Framing::kUntilClose : Framing::kChunked,
                                request_.version, close);
  stream_close_ = close;
  stream_chunked_ = !http10;
}

bool Exchange::write(std::string_view bytes) {
  if (phase_ != Phase::kStreaming) return false;
  if (bytes.empty()) return !connection_->client_gone(true, request_.version);
  std::string framed = std::move(stream_head_);
  stream_head_.clear();
  if (is_head_request(request_.method)) {
    // The head alone answers HEAD; the producer may stop.
    if (!framed.empty()) connection_->queue(std::move(framed), false, false);
    return false;
  }
  framed += stream_chunked_ ? chunk(bytes) : std::string(bytes);
  return connection_->queue(std::move(framed), false, false) && connection_->wait_writable();
}

void Exchange::end_stream() {
  if (phase_ != Phase::kStreaming) return;
  phase_ = Phase::kDone;
  std::string bytes = std::move(stream_head_);
  if (stream_chunked_ && !is_head_request(request_.method)) bytes += kLastChunk;
  connection_->queue(std::move(bytes), true, stream_close_);
}

bool Exchange::client_gone() {
  return connection_->client_gone(phase_ == Phase::kStreaming, request_.version);
}

// --- Transport --------------------------------------------------------------------------------

void Transport::State::accept() {
  acceptor.async_accept([this](const error_code& ec, tcp::socket socket) {
    if (stopping || !acceptor.is_open()) return;
    if (ec) {
      // Out of descriptors or memory: try again shortly instead of spinning.
      accept_retry.expires_after(std::chrono::milliseconds(50));
      accept_retry.async_wait([this](const error_code& wait_error) {
        if (!wait_error) accept();
      });
      return;
    }
    if (open.load() >= limits.max_connections) {
      error_code ignored;
      socket.close(ignored);
    } else {
      open.fetch_add(1);
      auto connection = std::make_shared<Connection>(*this, std::move(socket));
      live.insert(connection);
      connection->start();
    }
    accept();
  });
}

void Transport::State::close_all() {
  error_code ignored;
  acceptor.close(ignored);
  accept_retry.cancel();
  auto connections = live;  // close_now() erases from `live`
  for (const auto& connection : connections) connection->close_now();
}

Transport::Transport(const ConnectionLimits& limits, int worker_threads, Handler& handler)
    : state_(std::make_shared<State>(limits, worker_threads, handler)) {}

Transport::~Transport() { stop(); }

Status Transport::listen(const std::string& host, int port) {
  error_code ec;
  const auto address = asio::ip::make_address(host == "localhost" ? "127.0.0.1" : host, ec);
  if (ec)
    return make_error(StatusCode::kInvalidArgument, "invalid --host '{}': {}", host, ec.message());
  const tcp::endpoint endpoint(address, static_cast<unsigned short>(port));
  tcp::acceptor& acceptor = state_->acceptor;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    error_code ignored;
    acceptor.close(ignored);
    return make_error(StatusCode::kUnavailable, "cannot listen on {}:{} ({})", host, port,
                      ec.message());
  }
  return Status::ok();
}

int Transport::port() const {
  error_code ec;
  const auto endpoint = state_->acceptor.local_endpoint(ec);
  return ec ? 0 : endpoint.port();
}

void Transport::start() {
  State& state = *state_;
  state.accept();
  state.loop = std::thread([&state] { state.io.run(); });
}

void Transport::begin_drain() {
  State& state = *state_;
  state.draining = true;
  asio::post(state.io, [&state] {
    auto connections = state.live;
    for (const auto& connection : connections) connection->close_if_idle();
  });
}

void Transport::stop(std::chrono::milliseconds grace) {
  State& state = *state_;
  if (state.stopping.exchange(true)) return;
  if (!state.loop.joinable()) {
    error_code ignored;
    state.acceptor.close(ignored);
    state.workers.join();
    return;
  }
  // No new connections; connections between requests close now; responses being written
  // get `grace` to reach their clients (a stream that ended during the drain still has its
  // last events queued).
  asio::post(state.io, [&state] {
    error_code ignored;
    state.acceptor.close(ignored);
    state.accept_retry.cancel();
    auto connections = state.live;
    for (const auto& connection : connections) connection->close_if_idle();
  });
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (state.open.load() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  asio::post(state.io, [&state] { state.close_all(); });
  // Workers see their connections closed and finish; what they post then still runs, and the
  // loop ends by itself once no socket, timer or handler is left.
  state.workers.join();
  state.loop.join();
}

int Transport::open_connections() const { return state_->open.load(); }

}  // namespace llamaserve::http
