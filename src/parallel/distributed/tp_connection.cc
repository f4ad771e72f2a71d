#include "parallel/distributed/tp_connection.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <thread>

#include <fmt/format.h>

namespace llamaserve {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kConnectAttempt{5000};  // one connect() to an unresponsive address

// Milliseconds left until `deadline` for poll(): -1 for none, at least 0.
int poll_timeout(TpDeadline deadline) {
  if (deadline == kTpNoDeadline) return -1;
  const auto left = std::chrono::duration_cast<milliseconds>(deadline - TpClock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
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

int64_t ms_until(TpDeadline deadline, TpClock::time_point from) {
  return std::chrono::duration_cast<milliseconds>(deadline - from).count();
}

int poll_until(std::vector<pollfd>& fds, TpDeadline deadline) {
  while (true) {
    const int ready = ::poll(fds.data(), fds.size(), poll_timeout(deadline));
    if (ready >= 0 || errno != EINTR) return ready;
  }
}

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

Result<TpListener> listen_tcp(const std::string& host, int port) {
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
  return TpListener{fd, bound_port};
}

int accept_tcp(int listener, std::string& peer_address) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  const int fd = ::accept4(listener, reinterpret_cast<sockaddr*>(&address), &length, SOCK_CLOEXEC);
  if (fd < 0) return -1;
  configure_socket(fd);
  peer_address = address_text(address, length);
  return fd;
}

Result<int> connect_tcp(const HostPort& target, TpDeadline deadline) {
  const auto start = TpClock::now();
  std::string last_error = "no attempt";
  auto backoff = milliseconds(100);
  int fd = -1;
  while (fd < 0) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* found = nullptr;
    const std::string service = std::to_string(target.port);
    const int gai = getaddrinfo(target.host.c_str(), service.c_str(), &hints, &found);
    if (gai != 0) {
      last_error = fmt::format("cannot resolve '{}': {}", target.host, gai_strerror(gai));
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
                        "could not connect to {}:{} within {} ms (last attempt: {})", target.host,
                        target.port, ms_until(deadline, start), last_error);
    }
    std::this_thread::sleep_for(std::min<TpClock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, milliseconds(1000));
  }
  return fd;
}

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

void TpConnection::shutdown() { ::shutdown(fd_, SHUT_RDWR); }

}  // namespace llamaserve
