// Client liveness for requests that wait on the engine. cpp-httplib 0.11 does not hand the
// connection's socket to a handler, and a non-streaming handler writes nothing until the
// generation ends, so a client that hung up would go unnoticed for the whole generation.
// The socket is found instead by its TCP 4-tuple: among this process's sockets, the one
// whose peer is the request's remote address and port and whose local port is the
// request's. The tuple is unique while the connection exists, and httplib closes the socket
// only after the handler (and any content provider) has returned, so the descriptor stays
// valid for as long as the handler may look at it.
#pragma once

#include <string>

namespace llamaserve::server {

class ConnectionWatch {
 public:
  ConnectionWatch() = default;
  // Locates the socket; found() is false when no socket matches (then peer_closed() is
  // always false and disconnects are only noticed when a write fails).
  ConnectionWatch(const std::string& remote_addr, int remote_port, int local_port);

  bool found() const { return socket_fd_ >= 0; }
  int socket_fd() const { return socket_fd_; }

  // Non-blocking: true once the client has closed or reset the connection, or shut down its
  // sending side. Unread bytes from the client (a pipelined request) count as alive.
  bool peer_closed() const;

 private:
  int socket_fd_ = -1;
};

// Exposed for tests: the same checks on any connected socket.
bool socket_peer_closed(int socket_fd);
int find_socket_by_peer(const std::string& remote_addr, int remote_port, int local_port);

}  // namespace llamaserve::server
