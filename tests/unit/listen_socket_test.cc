// net::ListenSocket: opening TCP and unix listeners, and what one accept gives.
#include "common/listen_socket.h"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "tests/unit/loopback_sockets.h"

using ot::net::AcceptStatus;
using ot::net::ListenSocket;

TEST_CASE("listen socket: accept says when the backlog is empty and hands out connections") {
  auto opened = ListenSocket::open(ot::testing::loopbackListenAddress());
  REQUIRE(opened.ok());
  const ListenSocket& socket = *opened;
  CHECK(socket.port() != 0);
  CHECK_FALSE(socket.isUnix());
  CHECK(socket.name() == "127.0.0.1:" + std::to_string(socket.port()));
  CHECK((::fcntl(socket.fd(), F_GETFL) & O_NONBLOCK) != 0);

  sockaddr_storage peer{};
  const ot::net::Accepted none = socket.accept(&peer);
  CHECK(none.status == AcceptStatus::kNoneWaiting);
  CHECK(none.fd == -1);

  // connect() returns once the kernel completed the handshake from the backlog.
  const int client = ot::testing::connectLoopback(socket.port());
  REQUIRE(client >= 0);
  ot::net::Accepted got;
  for (int i = 0; i < 1000 && got.status != AcceptStatus::kAccepted; ++i) {
    got = socket.accept(&peer);
    if (got.status == AcceptStatus::kNoneWaiting) ::usleep(1000);
  }
  REQUIRE(got.status == AcceptStatus::kAccepted);
  CHECK((::fcntl(got.fd, F_GETFL) & O_NONBLOCK) != 0);
  CHECK((::fcntl(got.fd, F_GETFD) & FD_CLOEXEC) != 0);
  CHECK(peer.ss_family == AF_INET);
  CHECK(ntohl(reinterpret_cast<const sockaddr_in*>(&peer)->sin_addr.s_addr) == INADDR_LOOPBACK);
  ::close(got.fd);
  ::close(client);
  CHECK(socket.accept(&peer).status == AcceptStatus::kNoneWaiting);
}

TEST_CASE("listen socket: a unix socket replaces a stale file, refuses a live one, cleans up") {
  std::string pattern = (std::filesystem::temp_directory_path() / "ot-listen-XXXXXX").string();
  REQUIRE(::mkdtemp(pattern.data()) != nullptr);
  const std::string path = pattern + "/api.sock";
  ot::config::ListenAddress address;
  address.kind = ot::config::ListenAddress::Kind::kUnix;
  address.path = path;
  {
    // A socket file nobody listens on, as a crash leaves it.
    const int stale = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un un{};
    un.sun_family = AF_UNIX;
    std::memcpy(un.sun_path, path.c_str(), path.size() + 1);
    REQUIRE(::bind(stale, reinterpret_cast<sockaddr*>(&un), sizeof un) == 0);
    ::close(stale);
  }
  {
    auto first = ListenSocket::open(address);
    REQUIRE_MESSAGE(first.ok(), (first.ok() ? "" : first.error().message));
    CHECK(first->isUnix());
    struct stat info {};
    REQUIRE(::stat(path.c_str(), &info) == 0);
    CHECK((info.st_mode & 0777) == 0660);
    // A second server on the same path while the first answers is refused.
    auto second = ListenSocket::open(address);
    CHECK_FALSE(second.ok());
  }
  CHECK_FALSE(std::filesystem::exists(path));  // removed with the socket that made it
  std::filesystem::remove_all(pattern);
}
