// Test helpers for servers listening on 127.0.0.1: the listen address to give them, and a
// blocking client connection to one.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdint>

#include "common/config.h"

namespace ot::testing {

// 127.0.0.1:port (0: the kernel picks a free port).
inline config::ListenAddress loopbackListenAddress(uint16_t port = 0) {
  config::ListenAddress address;
  address.kind = config::ListenAddress::Kind::kTcp;
  address.host = "127.0.0.1";
  address.port = port;
  return address;
}

// A blocking, close-on-exec socket connected to 127.0.0.1:port, -1 when the connection is
// refused. connect() returns once the kernel completed the handshake from the backlog, before any
// accept. Reads time out after 5 s, so a broken server fails a test instead of hanging it.
inline int connectLoopback(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval timeout{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace ot::testing
