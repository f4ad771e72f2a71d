#include "parallel/rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace llamaserve {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kHelloTimeout{10000};   // a connection that says nothing is not a rank
constexpr milliseconds kConnectAttempt{5000};  // one connect() to an unresponsive address
constexpr milliseconds kSetupAfterConnect{30000};

// Milliseconds left until `deadline` for poll(): -1 for none, at least 0.
int poll_timeout(TpDeadline deadline) {
  if (deadline == kTpNoDeadline) return -1;
  const auto left = std::chrono::duration_cast<milliseconds>(deadline - TpClock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

int64_t ms_until(TpDeadline deadline, TpClock::time_point from) {
  return std::chrono::duration_cast<milliseconds>(deadline - from).count();
}

// poll() on `fds`, retried on EINTR. Returns the number ready (0: the deadline passed).
int poll_until(std::vector<pollfd>& fds, TpDeadline deadline) {
  while (true) {
    const int ready = ::poll(fds.data(), fds.size(), poll_timeout(deadline));
    if (ready >= 0 || errno != EINTR) return ready;
  }
}

// Small frames every step, both ways: no Nagle delay. Keepalive probes find a peer host that
// vanished (no FIN ever comes) within about a minute while a rank waits for the next message.
void configure_socket(int fd) {
  const int one = 1, idle_s = 30, interval_s = 5, probes = 6;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof(idle_s));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof(interval_s));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
}

std::string address_text(const sockaddr_storage& address, socklen_t length) {
  char host[NI_MAXHOST], port[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&address), length, host, sizeof(host), port,
                  sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "an unknown address";
  }
  return address.ss_family == AF_INET6 ? fmt::format("[{}]:{}", host, port)
                                       : fmt::format("{}:{}", host, port);
}

std::string join_ranks(const std::vector<int>& ranks) {
  return fmt::format("{}", fmt::join(ranks, ", "));
}

// One non-blocking connect() to `address`, waiting at most until `deadline`. Returns the
// connected (blocking) socket, or -1 with the reason in `error`.
int connect_once(const addrinfo& address, TpDeadline deadline, std::string& error) {
  const int fd = ::socket(address.ai_family, address.ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                          address.ai_protocol);
  if (fd < 0) {
    error = fmt::format("socket: {}", std::strerror(errno));
    return -1;
  }
  int result = ::connect(fd, address.ai_addr, address.ai_addrlen);
  if (result != 0 && errno == EINPROGRESS) {
    std::vector<pollfd> fds = {{fd, POLLOUT, 0}};
    const TpDeadline attempt = std::min(deadline, tp_deadline_after(kConnectAttempt));
    if (poll_until(fds, attempt) <= 0) {
      error = "connection attempt timed out";
      ::close(fd);
      return -1;
    }
    int so_error = 0;
    socklen_t length = sizeof(so_error);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &length);
    errno = so_error;
    result = so_error == 0 ? 0 : -1;
  }
  if (result != 0) {
    error = std::strerror(errno);
    ::close(fd);
    return -1;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  configure_socket(fd);
  return fd;
}

}  // namespace

Result<HostPort> parse_host_port(std::string_view text) {
  HostPort out;
  std::string_view port;
  if (text.starts_with('[')) {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return make_error(StatusCode::kInvalidArgument,
                        "'{}': expected [IPv6 address]:port, e.g. [fd00::7]:29500", text);
    }
    out.host = std::string(text.substr(1, close - 1));
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos || text.find(':') != colon) {
      return make_error(StatusCode::kInvalidArgument,
                        "'{}': expected host:port, e.g. llamaserve-0.llamaserve-tp:29500", text);
    }
    out.host = std::string(text.substr(0, colon));
    port = text.substr(colon + 1);
  }
  const auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), out.port);
  if (out.host.empty() || port.empty() || error != std::errc() ||
      end != port.data() + port.size() || out.port < 1 || out.port > 65535) {
    return make_error(StatusCode::kInvalidArgument,
                      "'{}': expected host:port with a host and a port in [1, 65535]", text);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// TpConnection

TpConnection::TpConnection(int fd, std::string peer) : fd_(fd), peer_(std::move(peer)) {}

TpConnection::~TpConnection() {
  if (fd_ >= 0) ::close(fd_);
}

Status TpConnection::send(std::span<const uint8_t> frame) {
  size_t sent = 0;
  while (sent < frame.size()) {
    const ssize_t n = ::send(fd_, frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return make_error(StatusCode::kIo, "sending to {}: {}", peer_,
                        n < 0 ? std::strerror(errno) : "connection closed");
    }
    sent += static_cast<size_t>(n);
  }
  return Status::ok();
}

Status TpConnection::read_exact(std::span<uint8_t> out, TpDeadline deadline, size_t& got) {
  got = 0;
  std::vector<pollfd> fds = {{fd_, POLLIN, 0}};
  while (got < out.size()) {
    const int ready = poll_until(fds, deadline);
    if (ready < 0)
      return make_error(StatusCode::kIo, "waiting for {}: {}", peer_, std::strerror(errno));
    if (ready == 0) {
      return make_error(StatusCode::kDeadlineExceeded, "{} sent nothing in time", peer_);
    }
    const ssize_t n = ::recv(fd_, out.data() + got, out.size() - got, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    // A peer that exits with data of ours unread resets the connection instead of closing it.
    if (n == 0 || (n < 0 && errno == ECONNRESET)) {
      return Status(StatusCode::kUnavailable, "closed");  // named by the caller
    }
    if (n < 0)
      return make_error(StatusCode::kIo, "reading from {}: {}", peer_, std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  return Status::ok();
}

Status TpConnection::receive(TpMessage& message, TpDeadline deadline) {
  std::array<uint8_t, kTpFrameHeaderBytes> header;
  size_t got = 0;
  Status status = read_exact(header, deadline, got);
  if (status.code() == StatusCode::kUnavailable) {
    if (got == 0) return make_error(StatusCode::kUnavailable, "{} closed the connection", peer_);
    return make_error(StatusCode::kIo,
                      "{} closed the connection after {} of the {} bytes of a frame header", peer_,
                      got, kTpFrameHeaderBytes);
  }
  LS_RETURN_IF_ERROR(status);
  auto decoded = decode_frame_header(header);
  if (!decoded.is_ok()) return decoded.status().with_context(fmt::format("from {}", peer_));
  payload_.resize(decoded->payload_bytes);
  status = read_exact(payload_, deadline, got);
  if (status.code() == StatusCode::kUnavailable) {
    return make_error(StatusCode::kIo,
                      "{} closed the connection after {} of the {} payload bytes of a {} frame",
                      peer_, got, payload_.size(), tp_message_kind_name(decoded->kind));
  }
  LS_RETURN_IF_ERROR(status);
  status = decode_frame_payload(*decoded, payload_, message);
  if (!status.is_ok()) return status.with_context(fmt::format("from {}", peer_));
  return Status::ok();
}

bool TpConnection::peer_closed() const {
  pollfd fd{fd_, POLLRDHUP, 0};
  return ::poll(&fd, 1, 0) > 0 && (fd.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

void TpConnection::shutdown() { ::shutdown(fd_, SHUT_RDWR); }

// ---------------------------------------------------------------------------------------------
// TpCoordinator

Result<std::unique_ptr<TpCoordinator>> TpCoordinator::listen(const std::string& host, int port) {
  if (port < 0 || port > 65535) {
    return make_error(StatusCode::kInvalidArgument, "port {} outside [0, 65535]", port);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  const int gai =
      getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
  if (gai != 0) {
    return make_error(StatusCode::kInvalidArgument, "cannot listen on '{}': {}", host,
                      gai_strerror(gai));
  }
  std::string error = "no address";
  int fd = -1;
  // Every interface: prefer IPv6, which also takes IPv4 unless the system says otherwise.
  std::vector<const addrinfo*> candidates;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) candidates.push_back(a);
  std::stable_partition(candidates.begin(), candidates.end(),
                        [](const addrinfo* a) { return a->ai_family == AF_INET6; });
  for (const addrinfo* a : candidates) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1, zero = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (a->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 64) == 0) break;
    error = std::strerror(errno);
    ::close(fd);
    fd = -1;
  }
  freeaddrinfo(found);
  if (fd < 0) {
    return make_error(StatusCode::kUnavailable,
                      "cannot listen on {}:{} for tensor-parallel ranks: {}",
                      host.empty() ? "*" : host, port, error);
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
  const int bound_port =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
  return std::unique_ptr<TpCoordinator>(new TpCoordinator(fd, bound_port));
}

TpCoordinator::~TpCoordinator() { close_listener(); }

void TpCoordinator::close_listener() {
  if (listener_ >= 0) ::close(listener_);
  listener_ = -1;
}

std::vector<std::string> TpCoordinator::describe_ranks() const {
  std::vector<std::string> out;
  for (size_t r = 1; r < ranks_.size(); ++r) {
    if (ranks_[r]) out.push_back(fmt::format("rank {}: {}", r, origins_[r]));
  }
  return out;
}

Status TpCoordinator::check_hello(const TpHello& hello, const std::string& address,
                                  const TpGroupConfig& config) const {
  const std::string who = fmt::format("{} from {}", hello.origin, address);
  if (hello.world != config.world) {
    return make_error(StatusCode::kInvalidArgument,
                      "rank {} ({}) was started for {} ranks, rank 0 for {}: give every rank "
                      "the same --tp",
                      hello.rank, who, hello.world, config.world);
  }
  if (hello.rank == 0) {
    return make_error(StatusCode::kInvalidArgument,
                      "a second rank 0 ({}): rank 0 is the server; start the other ranks with "
                      "--tp-rank 1 to {}",
                      who, config.world - 1);
  }
  if (ranks_[static_cast<size_t>(hello.rank)]) {
    return make_error(StatusCode::kInvalidArgument,
                      "rank {} joined twice: from {}, and before that from {}", hello.rank, who,
                      origins_[static_cast<size_t>(hello.rank)]);
  }
  if (hello.model_fingerprint != config.model_fingerprint) {
    return make_error(StatusCode::kInvalidArgument,
                      "rank {} ({}) loaded another model (fingerprint {:016x}; rank 0's is "
                      "{:016x}): every rank needs the same GGUF file",
                      hello.rank, who, hello.model_fingerprint, config.model_fingerprint);
  }
  return Status::ok();
}

Status TpCoordinator::accept_ranks(const TpGroupConfig& config, TpDeadline deadline) {
  if (config.world < 2 || config.world > kTpMaxWorld) {
    return make_error(StatusCode::kInvalidArgument, "tensor-parallel world {} outside [2, {}]",
                      config.world, kTpMaxWorld);
  }
  if (listener_ < 0) {
    return Status(StatusCode::kInternal, "accept_ranks: the listening socket is closed");
  }
  const auto start = TpClock::now();
  world_ = config.world;
  ranks_.clear();
  ranks_.resize(static_cast<size_t>(world_));
  origins_.assign(static_cast<size_t>(world_), std::string());
  std::string dropped;  // the last connection dropped as not a rank, for the timeout's message
  int joined = 0;
  while (joined < world_ - 1) {
    std::vector<pollfd> fds = {{listener_, POLLIN, 0}};
    if (poll_until(fds, deadline) == 0) {
      std::vector<int> missing;
      for (int r = 1; r < world_; ++r) {
        if (!ranks_[static_cast<size_t>(r)]) missing.push_back(r);
      }
      const std::vector<std::string> present = describe_ranks();
      Status timeout = make_error(
          StatusCode::kDeadlineExceeded,
          "waited {} ms on port {} for tensor-parallel rank(s) {} of {}; {}{}{}. Start each with "
          "`llamaserve tp-worker --tp {} --tp-rank R --tp-coordinator HOST:{}`",
          ms_until(deadline, start), port_, join_ranks(missing), world_,
          present.empty() ? std::string("none joined")
                          : fmt::format("{}", fmt::join(present, "; ")),
          dropped.empty() ? "" : "; dropped a connection that was not a rank: ", dropped, world_,
          port_);
      fail(timeout);
      return timeout;
    }
    sockaddr_storage address{};
    socklen_t length = sizeof(address);
    const int fd =
        ::accept4(listener_, reinterpret_cast<sockaddr*>(&address), &length, SOCK_CLOEXEC);
    if (fd < 0) continue;  // the peer gave up already, or a signal
    configure_socket(fd);
    const std::string from = address_text(address, length);
    auto connection = std::make_unique<TpConnection>(fd, "a connection from " + from);
    Status status =
        connection->receive(message_, std::min(deadline, tp_deadline_after(kHelloTimeout)));
    if (status.is_ok() && message_.kind != TpMessageKind::kHello) {
      status = make_error(StatusCode::kInvalidArgument, "{} sent a {} message before its hello",
                          connection->peer(), tp_message_kind_name(message_.kind));
    }
    if (!status.is_ok()) {
      spdlog::warn("tensor parallel: dropped {}: {}", connection->peer(), status.to_string());
      encode_status(0, status, 0, frame_);
      (void)connection->send(frame_);  // it may listen (another build's rank); best effort
      dropped = status.message();
      continue;
    }
    const TpHello& hello = message_.hello;
    const Status refused = check_hello(hello, from, config);
    if (!refused.is_ok()) {
      encode_status(0, refused, 0, frame_);
      (void)connection->send(frame_);
      fail(refused);
      return refused;
    }
    encode_setup(config.setup, frame_);
    if (Status sent = connection->send(frame_); !sent.is_ok()) {
      spdlog::warn("tensor parallel: rank {} from {} left before its setup: {}", hello.rank, from,
                   sent.to_string());
      continue;  // it may come back
    }
    const auto r = static_cast<size_t>(hello.rank);
    origins_[r] = fmt::format("{} from {}", hello.origin, from);
    connection->set_peer(fmt::format("rank {} ({})", hello.rank, origins_[r]));
    ranks_[r] = std::move(connection);
    ++joined;
    spdlog::info("tensor parallel: rank {} of {} joined: {}", hello.rank, world_, origins_[r]);
  }
  close_listener();
  return Status::ok();
}

Status TpCoordinator::broadcast(std::string_view what) {
  if (!failed_.is_ok()) return failed_;
  for (size_t r = 1; r < ranks_.size(); ++r) {
    Status sent = ranks_[r]->send(frame_);
    if (!sent.is_ok()) {
      Status status = sent.with_context(what);
      fail(status);
      return status;
    }
  }
  return Status::ok();
}

Status TpCoordinator::collect(uint32_t step, int local_done_fd, TpDeadline deadline,
                              std::string_view phase, std::vector<int64_t>* values) {
  if (!failed_.is_ok()) return failed_;
  const auto start = TpClock::now();
  std::vector<bool> answered(ranks_.size(), false);
  size_t waiting = ranks_.size() - 1;
  bool local_done = local_done_fd < 0;
  std::vector<pollfd> fds;
  std::vector<size_t> rank_of;
  while (waiting > 0 || !local_done) {
    fds.clear();
    rank_of.clear();
    if (!local_done) fds.push_back({local_done_fd, POLLIN, 0});
    for (size_t r = 1; r < ranks_.size(); ++r) {
      if (answered[r]) continue;
      fds.push_back({ranks_[r]->fd(), POLLIN | POLLRDHUP, 0});
      rank_of.push_back(r);
    }
    const int ready = poll_until(fds, deadline);
    if (ready <= 0) {
      std::vector<int> silent;
      for (size_t r : rank_of) silent.push_back(static_cast<int>(r));
      Status status =
          ready < 0 ? make_error(StatusCode::kIo, "{}: poll: {}", phase, std::strerror(errno))
          : silent.empty()
              ? make_error(StatusCode::kDeadlineExceeded, "{}: rank 0's own pass took over {} ms",
                           phase, ms_until(deadline, start))
              : make_error(StatusCode::kDeadlineExceeded,
                           "{}: no answer from rank(s) {} within {} ms", phase, join_ranks(silent),
                           ms_until(deadline, start));
      fail(status);
      return status;
    }
    size_t first_rank = 0;
    if (!local_done) {
      local_done = (fds[0].revents & POLLIN) != 0;
      first_rank = 1;
    }
    for (size_t i = first_rank; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      const size_t r = rank_of[i - first_rank];
      Status status = ranks_[r]->receive(message_, deadline);
      if (status.is_ok() && (message_.kind != TpMessageKind::kStatus || message_.step != step)) {
        status =
            make_error(StatusCode::kInternal,
                       "{} answered with a {} message of step {}; expected the status of "
                       "step {}",
                       ranks_[r]->peer(), tp_message_kind_name(message_.kind), message_.step, step);
      } else if (status.is_ok() && !message_.status.is_ok()) {
        status = Status(message_.status.code(),
                        fmt::format("{}: {}", ranks_[r]->peer(), message_.status.message()));
      }
      if (!status.is_ok()) {
        status = status.with_context(phase);
        fail(status);
        return status;
      }
      if (values != nullptr) (*values)[r] = message_.value;
      answered[r] = true;
      --waiting;
    }
  }
  return Status::ok();
}

Result<std::vector<int64_t>> TpCoordinator::gather(std::string_view phase, TpDeadline deadline) {
  std::vector<int64_t> values(ranks_.size(), 0);
  LS_RETURN_IF_ERROR(collect(0, -1, deadline, phase, &values));
  return values;
}

Status TpCoordinator::send_start(int32_t kv_blocks) {
  encode_start(kv_blocks, frame_);
  return broadcast("sending the KV block count");
}

Status TpCoordinator::send_comm_id(const TpCommId& id) {
  encode_comm_id(id, frame_);
  return broadcast("sending the NCCL id");
}

Status TpCoordinator::send_batch(uint32_t step, const Batch& batch) {
  if (!failed_.is_ok()) return failed_;
  Status encoded = encode_batch(step, batch, frame_);
  if (!encoded.is_ok()) return encoded;  // the caller's batch, not the group, is at fault
  return broadcast(fmt::format("step {}", step));
}

Status TpCoordinator::await_step(uint32_t step, int local_done_fd, TpDeadline deadline) {
  return collect(step, local_done_fd, deadline, fmt::format("step {}", step), nullptr);
}

Status TpCoordinator::shutdown(TpDeadline deadline) {
  if (!failed_.is_ok()) return failed_;
  encode_shutdown(frame_);
  LS_RETURN_IF_ERROR(broadcast("shutting the ranks down"));
  LS_RETURN_IF_ERROR(collect(0, -1, deadline, "shutting the ranks down", nullptr));
  for (size_t r = 1; r < ranks_.size(); ++r) ranks_[r].reset();
  return Status::ok();
}

void TpCoordinator::fail(const Status& reason) {
  if (!failed_.is_ok()) return;
  failed_ = reason.is_ok() ? Status(StatusCode::kInternal, "fail() without a reason") : reason;
  close_listener();
  encode_status(0, failed_, 0, frame_);
  for (size_t r = 1; r < ranks_.size(); ++r) {
    if (!ranks_[r]) continue;
    // Best effort and never blocking: the rank may be gone or not reading.
    (void)::send(ranks_[r]->fd(), frame_.data(), frame_.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    ranks_[r]->shutdown();
  }
}

// ---------------------------------------------------------------------------------------------
// TpWorkerLink

Result<std::unique_ptr<TpWorkerLink>> TpWorkerLink::join(const HostPort& coordinator,
                                                         const TpHello& hello,
                                                         TpDeadline deadline) {
  const auto start = TpClock::now();
  const std::string target = fmt::format("{}:{}", coordinator.host, coordinator.port);
  std::string last_error = "no attempt";
  auto backoff = milliseconds(100);
  int fd = -1;
  while (fd < 0) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* found = nullptr;
    const std::string service = std::to_string(coordinator.port);
    const int gai = getaddrinfo(coordinator.host.c_str(), service.c_str(), &hints, &found);
    if (gai != 0) {
      last_error = fmt::format("cannot resolve '{}': {}", coordinator.host, gai_strerror(gai));
    } else {
      for (const addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
        fd = connect_once(*a, deadline, last_error);
      }
      freeaddrinfo(found);
    }
    if (fd >= 0) break;
    const auto now = TpClock::now();
    if (now >= deadline) {
      return make_error(StatusCode::kDeadlineExceeded,
                        "could not connect to rank 0 at {} within {} ms (last attempt: {}); is "
                        "`llamaserve serve --tp-rank 0 --tp-listen {}` running there and "
                        "reachable from this host?",
                        target, ms_until(deadline, start), last_error, coordinator.port);
    }
    std::this_thread::sleep_for(std::min<TpClock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, milliseconds(1000));
  }
  auto connection = std::make_unique<TpConnection>(fd, "rank 0 at " + target);
  std::vector<uint8_t> frame;
  encode_hello(hello, frame);
  LS_RETURN_IF_ERROR(connection->send(frame));
  TpMessage reply;
  // Rank 0 answers hellos one at a time: allow for one before ours that stalls.
  const TpDeadline answer = std::max(deadline, tp_deadline_after(kSetupAfterConnect));
  Status status = connection->receive(reply, answer);
  if (!status.is_ok()) return status.with_context("waiting for the setup");
  if (reply.kind == TpMessageKind::kStatus && !reply.status.is_ok()) {
    return Status(reply.status.code(), fmt::format("rank 0 at {} refused rank {}: {}", target,
                                                   hello.rank, reply.status.message()));
  }
  if (reply.kind != TpMessageKind::kSetup) {
    return make_error(StatusCode::kInternal, "rank 0 at {} answered the hello with a {} message",
                      target, tp_message_kind_name(reply.kind));
  }
  return std::unique_ptr<TpWorkerLink>(new TpWorkerLink(std::move(connection), reply.setup));
}

Status TpWorkerLink::send_status(uint32_t step, const Status& status, int64_t value) {
  encode_status(step, status, value, frame_);
  return connection_->send(frame_);
}

Status TpWorkerLink::receive(TpMessageKind expected) {
  Status status = connection_->receive(message_, kTpNoDeadline);
  if (!status.is_ok()) {
    return status.with_context(fmt::format("waiting for the {}", tp_message_kind_name(expected)));
  }
  if (message_.kind == TpMessageKind::kStatus && !message_.status.is_ok()) {
    return Status(message_.status.code(), "rank 0: " + message_.status.message());
  }
  if (message_.kind != expected) {
    return make_error(StatusCode::kInternal, "{} sent a {} message; expected the {}",
                      connection_->peer(), tp_message_kind_name(message_.kind),
                      tp_message_kind_name(expected));
  }
  return Status::ok();
}

Result<int32_t> TpWorkerLink::receive_start() {
  LS_RETURN_IF_ERROR(receive(TpMessageKind::kStart));
  return message_.kv_blocks;
}

Result<TpCommId> TpWorkerLink::receive_comm_id() {
  LS_RETURN_IF_ERROR(receive(TpMessageKind::kCommId));
  return message_.comm_id;
}

Result<TpWorkerLink::Command> TpWorkerLink::next() {
  Status status = connection_->receive(message_, kTpNoDeadline);
  if (status.code() == StatusCode::kUnavailable) return Command::kClosed;
  LS_RETURN_IF_ERROR(status);
  switch (message_.kind) {
    case TpMessageKind::kBatch: return Command::kBatch;
    case TpMessageKind::kShutdown: return Command::kShutdown;
    case TpMessageKind::kStatus:
      if (!message_.status.is_ok()) {
        return Status(message_.status.code(), "rank 0: " + message_.status.message());
      }
      [[fallthrough]];
    default:
      return make_error(StatusCode::kInternal, "{} sent a {} message between steps",
                        connection_->peer(), tp_message_kind_name(message_.kind));
  }
}

bool TpWorkerLink::wait_for_hangup(int done_fd) const {
  std::vector<pollfd> fds = {{done_fd, POLLIN, 0}, {connection_->fd(), POLLIN | POLLRDHUP, 0}};
  // Without a deadline poll returns only with something ready, or failed: a socket that
  // cannot be polled is as good as hung up.
  if (poll_until(fds, kTpNoDeadline) < 0) return true;
  return (fds[0].revents & POLLIN) == 0;
}

}  // namespace llamaserve
