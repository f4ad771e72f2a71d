#include "server/connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace llamaserve::server {
namespace {

int port_of(int fd, bool peer) {
  sockaddr_in address{};
  socklen_t length = sizeof(address);
  if (peer) {
    getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length);
  } else {
    getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  }
  return ntohs(address.sin_port);
}

// A loopback TCP connection: `client` and the accepted `server` side.
struct Loopback {
  int listener = -1, client = -1, server = -1;
  Loopback() {
    listener = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address));
    listen(listener, 4);
    socklen_t length = sizeof(address);
    getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length);
    client = socket(AF_INET, SOCK_STREAM, 0);
    connect(client, reinterpret_cast<sockaddr*>(&address), sizeof(address));
    server = accept(listener, nullptr, nullptr);
  }
  ~Loopback() {
    for (int fd : {listener, client, server}) {
      if (fd >= 0) close(fd);
    }
  }
};

TEST(ConnectionWatch, FindsTheAcceptedSocketByItsPeer) {
  Loopback link;
  ASSERT_GE(link.server, 0);
  const int client_port = port_of(link.client, /*peer=*/false);
  const int server_port = port_of(link.server, /*peer=*/false);
  ConnectionWatch watch("127.0.0.1", client_port, server_port);
  ASSERT_TRUE(watch.found());
  EXPECT_EQ(watch.socket_fd(), link.server);
  EXPECT_FALSE(ConnectionWatch("127.0.0.1", client_port, server_port + 1).found());
  EXPECT_FALSE(ConnectionWatch("127.0.0.2", client_port, server_port).found());
}

TEST(ConnectionWatch, SeesTheClientHangUp) {
  Loopback link;
  ConnectionWatch watch("127.0.0.1", port_of(link.client, false), port_of(link.server, false));
  ASSERT_TRUE(watch.found());
  EXPECT_FALSE(watch.peer_closed());
  // Unread bytes (a pipelined request) mean the client is still there.
  ASSERT_EQ(write(link.client, "GET / HTTP/1.1\r\n", 16), 16);
  usleep(10000);
  EXPECT_FALSE(watch.peer_closed());
  close(link.client);
  link.client = -1;
  usleep(10000);
  EXPECT_TRUE(watch.peer_closed());
}

TEST(ConnectionWatch, HalfCloseCountsAsGone) {
  Loopback link;
  ConnectionWatch watch("127.0.0.1", port_of(link.client, false), port_of(link.server, false));
  ASSERT_TRUE(watch.found());
  shutdown(link.client, SHUT_WR);
  usleep(10000);
  EXPECT_TRUE(watch.peer_closed());
}

TEST(ConnectionWatch, NotFoundNeverReportsClosed) {
  ConnectionWatch watch;
  EXPECT_FALSE(watch.found());
  EXPECT_FALSE(watch.peer_closed());
}

}  // namespace
}  // namespace llamaserve::server
