#include "server/connection.h"

#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace llamaserve::server {
namespace {

// Numeric host and port of a socket address, formatted as cpp-httplib formats
// Request::remote_addr (getnameinfo with NI_NUMERICHOST).
bool numeric_address(const sockaddr_storage& address, socklen_t length, std::string& host,
                     int& port) {
  char buffer[NI_MAXHOST];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&address), length, buffer, sizeof(buffer),
                  nullptr, 0, NI_NUMERICHOST) != 0) {
    return false;
  }
  host = buffer;
  if (address.ss_family == AF_INET) {
    port = ntohs(reinterpret_cast<const sockaddr_in*>(&address)->sin_port);
  } else if (address.ss_family == AF_INET6) {
    port = ntohs(reinterpret_cast<const sockaddr_in6*>(&address)->sin6_port);
  } else {
    return false;
  }
  return true;
}

bool local_port_of(int fd, int& port) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return false;
  std::string ignored;
  return numeric_address(address, length, ignored, port);
}

}  // namespace

int find_socket_by_peer(const std::string& remote_addr, int remote_port, int local_port) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  while (dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    struct stat info {};
    if (fstat(static_cast<int>(fd), &info) != 0 || !S_ISSOCK(info.st_mode)) continue;
    sockaddr_storage peer{};
    socklen_t length = sizeof(peer);
    if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &length) != 0) {
      continue;  // listening or unconnected socket
    }
    std::string host;
    int port = -1, local = -1;
    if (!numeric_address(peer, length, host, port)) continue;
    if (port != remote_port || host != remote_addr) continue;
    if (!local_port_of(static_cast<int>(fd), local) || local != local_port) continue;
    found = static_cast<int>(fd);
    break;
  }
  closedir(dir);
  return found;
}

bool socket_peer_closed(int socket_fd) {
  pollfd descriptor{socket_fd, POLLIN | POLLRDHUP, 0};
  int ready;
  do {
    ready = poll(&descriptor, 1, 0);
  } while (ready < 0 && errno == EINTR);
  if (ready <= 0) return false;
  if (descriptor.revents & (POLLERR | POLLHUP | POLLNVAL | POLLRDHUP)) return true;
  if (descriptor.revents & POLLIN) {
    char byte;
    const ssize_t n = recv(socket_fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return true;  // orderly shutdown
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return true;
  }
  return false;
}

ConnectionWatch::ConnectionWatch(const std::string& remote_addr, int remote_port, int local_port)
    : socket_fd_(find_socket_by_peer(remote_addr, remote_port, local_port)) {}

bool ConnectionWatch::peer_closed() const {
  return socket_fd_ >= 0 && socket_peer_closed(socket_fd_);
}

}  // namespace llamaserve::server
