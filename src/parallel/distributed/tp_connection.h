// One TCP connection that carries tensor-parallel frames (tp_protocol.h), and the socket
// plumbing of the rendezvous (rendezvous.h): deadlines, a listening socket, connecting with
// retries. Linux sockets; no CUDA.
#pragma once

#include <poll.h>

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "parallel/distributed/tp_protocol.h"

namespace llamaserve {

using TpClock = std::chrono::steady_clock;
using TpDeadline = TpClock::time_point;
inline constexpr TpDeadline kTpNoDeadline = TpDeadline::max();

inline TpDeadline tp_deadline_after(std::chrono::milliseconds timeout) {
  return TpClock::now() + timeout;
}

// Milliseconds from `from` to `deadline`, for messages.
int64_t ms_until(TpDeadline deadline, TpClock::time_point from);

// poll() on `fds` until `deadline` (kTpNoDeadline: none), retried on EINTR. Returns the number
// ready: 0 when the deadline passed, -1 when poll failed.
int poll_until(std::vector<pollfd>& fds, TpDeadline deadline);

struct HostPort {
  std::string host;
  int port = 0;
};

// "host:port", "10.0.0.7:29500" or "[fd00::7]:29500"; the port in [1, 65535].
Result<HostPort> parse_host_port(std::string_view text);

// A listening socket on host:port ("" = every interface, IPv6 and IPv4; port 0 = any free
// port) and the port it has.
struct TpListener {
  int fd = -1;
  int port = 0;
};
Result<TpListener> listen_tcp(const std::string& host, int port);

// Accepts one connection on `listener`: its socket (-1 if none could be taken) and the peer's
// numeric "address:port".
int accept_tcp(int listener, std::string& peer_address);

// Connects to `target`, trying again (backing off up to a second) until `deadline`: the peer
// may not listen yet, or its name may not resolve yet. Errors: kDeadlineExceeded naming
// host:port and why the last attempt failed.
Result<int> connect_tcp(const HostPort& target, TpDeadline deadline);

// One connected TCP socket carrying frames, with the peer's name for errors.
class TpConnection {
 public:
  TpConnection(int fd, std::string peer);
  ~TpConnection();
  TpConnection(const TpConnection&) = delete;
  TpConnection& operator=(const TpConnection&) = delete;

  int fd() const { return fd_; }
  const std::string& peer() const { return peer_; }
  void set_peer(std::string peer) { peer_ = std::move(peer); }

  // Sends one whole frame. Errors: kIo naming the peer (it reset or closed the connection).
  Status send(std::span<const uint8_t> frame);
  // Reads one frame into `message` (see TpMessage), waiting at most until `deadline`. Errors:
  // kUnavailable when the peer closed the connection between frames; kIo when it closed it in
  // the middle of one (naming how many bytes came) or the socket failed; kDeadlineExceeded;
  // kInvalidArgument for a malformed frame (decode_frame_header / decode_frame_payload).
  Status receive(TpMessage& message, TpDeadline deadline);
  // Shuts both directions down: a peer blocked reading sees the connection end.
  void shutdown();

 private:
  Status read_exact(std::span<uint8_t> out, TpDeadline deadline, size_t& got);

  int fd_;
  std::string peer_;
  std::vector<uint8_t> payload_;
};

}  // namespace llamaserve
