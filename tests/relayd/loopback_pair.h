// A connected loopback TCP pair for tests that put a real socket under a TcpStream: the first
// descriptor (non-blocking, small send buffer) is for the stream under test, the second
// (non-blocking, small receive buffer) is the peer the test drives by hand. The small kernel
// buffers keep what the peer does not read in the stream's user space, where the tests see it.
#pragma once

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <utility>

namespace ot::test {

inline std::pair<int, int> loopbackPair() {
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(listener >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  socklen_t length = sizeof address;
  REQUIRE(::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  REQUIRE(::listen(listener, 1) == 0);
  const int peer = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int small = 16 * 1024;
  ::setsockopt(peer, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  REQUIRE(::connect(peer, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  const int local = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  REQUIRE(local >= 0);
  ::setsockopt(local, SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  ::close(listener);
  ::fcntl(peer, F_SETFL, ::fcntl(peer, F_GETFL) | O_NONBLOCK);
  return {local, peer};
}

}  // namespace ot::test
