#include "relayd/listener.h"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <vector>

#include "common/log.h"
#include "common/metrics.h"
#include "relayd/relay_metrics.h"

using ot::relayd::Listener;

namespace {

ot::config::ListenAddress loopback(uint16_t port = 0) {
  ot::config::ListenAddress address;
  address.kind = ot::config::ListenAddress::Kind::kTcp;
  address.host = "127.0.0.1";
  address.port = port;
  return address;
}

// Runs the loop until nothing is left, so handles closed by the test are freed.
void drain(uv_loop_t* loop) {
  while (uv_run(loop, UV_RUN_DEFAULT) != 0) {
  }
}

// A blocking client socket connected to 127.0.0.1:port (the kernel completes the handshake from
// the backlog, before any accept).
int connectBlocking(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
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

sockaddr_storage v4Address(const char* text, uint16_t port) {
  sockaddr_storage storage{};
  auto* v4 = reinterpret_cast<sockaddr_in*>(&storage);
  v4->sin_family = AF_INET;
  v4->sin_port = htons(port);
  REQUIRE(::inet_pton(AF_INET, text, &v4->sin_addr) == 1);
  return storage;
}

sockaddr_storage v6Address(const char* text, uint16_t port) {
  sockaddr_storage storage{};
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&storage);
  v6->sin6_family = AF_INET6;
  v6->sin6_port = htons(port);
  REQUIRE(::inet_pton(AF_INET6, text, &v6->sin6_addr) == 1);
  return storage;
}

}  // namespace

TEST_CASE("listener: formatSocketAddress writes v4, bracketed v6 and v4-mapped as v4") {
  CHECK(ot::relayd::formatSocketAddress(v4Address("192.0.2.7", 443)) == "192.0.2.7:443");
  CHECK(ot::relayd::formatSocketAddress(v6Address("2001:db8::1", 8443)) == "[2001:db8::1]:8443");
  CHECK(ot::relayd::formatSocketAddress(v6Address("::ffff:203.0.113.9", 5)) == "203.0.113.9:5");
  CHECK(ot::relayd::formatSocketAddress(v6Address("::1", 65535)) == "[::1]:65535");
  sockaddr_storage unknown{};
  unknown.ss_family = AF_UNIX;
  CHECK(ot::relayd::formatSocketAddress(unknown).empty());
}

TEST_CASE("listener: accepts a libuv client on port 0 with a non-blocking close-on-exec fd") {
  uv_loop_t loop;
  REQUIRE(uv_loop_init(&loop) == 0);
  std::vector<int> accepted;
  std::string peerText;
  auto opened = Listener::open(
      &loop, loopback(), "test",
      [&](int fd, const sockaddr_storage& peer) {
        accepted.push_back(fd);
        peerText = ot::relayd::formatSocketAddress(peer);
      },
      nullptr);
  REQUIRE(opened.ok());
  std::unique_ptr<Listener> listener = std::move(opened).value();
  CHECK(listener->port() != 0);
  CHECK(listener->name() == "test");

  struct Client {
    uv_tcp_t tcp{};
    uv_connect_t connect{};
    int status = 1;
  } client;
  uv_tcp_init(&loop, &client.tcp);
  sockaddr_in target{};
  uv_ip4_addr("127.0.0.1", listener->port(), &target);
  client.connect.data = &client;
  REQUIRE(uv_tcp_connect(&client.connect, &client.tcp, reinterpret_cast<sockaddr*>(&target),
                         [](uv_connect_t* request, int status) {
                           static_cast<Client*>(request->data)->status = status;
                         }) == 0);
  // Run until both the connect completed and the listener handed the socket over.
  while (accepted.empty() || client.status == 1) uv_run(&loop, UV_RUN_ONCE);
  CHECK(client.status == 0);
  REQUIRE(accepted.size() == 1);

  sockaddr_storage local{};
  int length = sizeof local;
  REQUIRE(uv_tcp_getsockname(&client.tcp, reinterpret_cast<sockaddr*>(&local), &length) == 0);
  CHECK(peerText == ot::relayd::formatSocketAddress(local));
  CHECK(peerText.rfind("127.0.0.1:", 0) == 0);

  const int flags = ::fcntl(accepted[0], F_GETFL);
  CHECK((flags & O_NONBLOCK) != 0);
  CHECK((::fcntl(accepted[0], F_GETFD) & FD_CLOEXEC) != 0);

  ot::relayd::tuneSocket(accepted[0], 16384);
  int value = 0;
  socklen_t size = sizeof value;
  REQUIRE(::getsockopt(accepted[0], IPPROTO_TCP, TCP_NODELAY, &value, &size) == 0);
  CHECK(value == 1);
  REQUIRE(::getsockopt(accepted[0], IPPROTO_TCP, TCP_KEEPIDLE, &value, &size) == 0);
  CHECK(value == 60);
  REQUIRE(::getsockopt(accepted[0], IPPROTO_TCP, TCP_NOTSENT_LOWAT, &value, &size) == 0);
  CHECK(value == 16384);

  ::close(accepted[0]);
  uv_close(reinterpret_cast<uv_handle_t*>(&client.tcp), nullptr);
  listener.reset();
  drain(&loop);
  CHECK(uv_loop_close(&loop) == 0);
}

TEST_CASE("listener: close stops accepting, and the owner may destroy it from onAccept") {
  uv_loop_t loop;
  REQUIRE(uv_loop_init(&loop) == 0);
  std::unique_ptr<Listener> listener;
  int calls = 0;
  auto opened = Listener::open(
      &loop, loopback(), "test",
      [&](int fd, const sockaddr_storage&) {
        ++calls;
        ::close(fd);
        listener.reset();  // several connections are pending: none may be handed over after this
      },
      nullptr);
  REQUIRE(opened.ok());
  listener = std::move(opened).value();
  const uint16_t port = listener->port();
  std::vector<int> clients;
  for (int i = 0; i < 3; ++i) clients.push_back(connectBlocking(port));
  for (int fd : clients) REQUIRE(fd >= 0);
  drain(&loop);  // ends: the destroyed listener closed its handles
  CHECK(calls == 1);
  CHECK(listener == nullptr);
  CHECK(connectBlocking(port) == -1);  // the port is closed
  for (int fd : clients) ::close(fd);
  CHECK(uv_loop_close(&loop) == 0);
}

TEST_CASE("listener: an off address is refused") {
  uv_loop_t loop;
  REQUIRE(uv_loop_init(&loop) == 0);
  ot::config::ListenAddress off;
  auto opened = Listener::open(
      &loop, off, "test", [](int, const sockaddr_storage&) {}, nullptr);
  CHECK_FALSE(opened.ok());
  CHECK(uv_loop_close(&loop) == 0);
}

// The child process runs the whole scenario and reports through its exit status: 0 is success,
// anything else names the step that failed. The limit on descriptors never touches this process.
namespace {

enum ChildFailure {
  kOpenFailed = 10,
  kConnectFailed,
  kLimitFailed,
  kNoEmfile,
  kTimedOut,
  kWrongAcceptCount,
  kWrongEmfileCount,
};

int runEmfileScenario() {
  uv_loop_t loop;
  if (uv_loop_init(&loop) != 0) return kOpenFailed;
  ot::metrics::Metrics registry;
  ot::relayd::RelayMetrics metrics(registry);
  constexpr int kClients = 3;
  int accepted = 0;
  std::unique_ptr<Listener> listener;
  auto opened = Listener::open(
      &loop, loopback(), "emfile",
      [&](int fd, const sockaddr_storage&) {
        ::close(fd);
        if (++accepted == kClients) listener->close();
      },
      &metrics);
  if (!opened.ok()) return kOpenFailed;
  listener = std::move(opened).value();

  std::vector<int> clients;
  for (int i = 0; i < kClients; ++i) {
    const int fd = connectBlocking(listener->port());
    if (fd < 0) return kConnectFailed;
    clients.push_back(fd);
  }
  // Lower the limit to just above the highest descriptor in use, then fill every hole below it,
  // so the next descriptor the process asks for fails with EMFILE.
  int highest = 0;
  for (int fd = 0; fd < 4096; ++fd) {
    if (::fcntl(fd, F_GETFD) != -1) highest = fd;
  }
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return kLimitFailed;
  limit.rlim_cur = static_cast<rlim_t>(highest) + 1;
  if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) return kLimitFailed;
  std::vector<int> fillers;
  while (true) {
    const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) break;
    fillers.push_back(fd);
  }
  if (errno != EMFILE) return kLimitFailed;

  // Once the listener counted the failure, free the descriptors: it must resume by itself after
  // its pause and accept every pending connection.
  struct Watch {
    uv_check_t check{};
    uv_timer_t deadline{};
    ot::relayd::RelayMetrics* metrics = nullptr;
    std::vector<int>* fillers = nullptr;
    bool timedOut = false;
  } watch;
  watch.metrics = &metrics;
  watch.fillers = &fillers;
  uv_check_init(&loop, &watch.check);
  watch.check.data = &watch;
  uv_check_start(&watch.check, [](uv_check_t* handle) {
    auto* self = static_cast<Watch*>(handle->data);
    if (self->metrics->acceptEmfile.Value() < 1) return;
    for (int fd : *self->fillers) ::close(fd);
    self->fillers->clear();
    uv_check_stop(handle);
  });
  uv_timer_init(&loop, &watch.deadline);
  watch.deadline.data = &watch;
  uv_timer_start(
      &watch.deadline,
      [](uv_timer_t* handle) {
        static_cast<Watch*>(handle->data)->timedOut = true;
        uv_stop(handle->loop);
      },
      10'000, 0);
  uv_unref(reinterpret_cast<uv_handle_t*>(&watch.deadline));  // does not keep the loop alive

  uv_run(&loop, UV_RUN_DEFAULT);
  if (watch.timedOut) return kTimedOut;
  if (!fillers.empty()) return kNoEmfile;
  if (accepted != kClients) return kWrongAcceptCount;
  if (metrics.acceptEmfile.Value() != 1) return kWrongEmfileCount;
  return 0;
}

}  // namespace

TEST_CASE("listener: EMFILE pauses accepting, counts it, and accepting resumes (child process)") {
  // Logging is set up before descriptors run out, as relayd's main does: the listener's first
  // "accept paused" line must not be what creates the logger in a process with no fds left.
  ot::log::init({});
  ot::log::debug("emfile scenario starting");
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) ::_exit(runEmfileScenario());
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
