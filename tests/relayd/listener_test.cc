#include "relayd/listener.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <vector>

#include "common/log.h"
#include "common/metrics.h"
#include "relayd/relay_metrics.h"
#include "tests/unit/loopback_sockets.h"

using ot::relayd::Listener;

namespace {

// Runs the loop until nothing is left, so handles closed by the test are freed.
void drain(uv_loop_t* loop) {
  while (uv_run(loop, UV_RUN_DEFAULT) != 0) {
  }
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
      &loop, ot::testing::loopbackListenAddress(), "test",
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

  // The accepted socket carries the public options already: inherited from the listening socket,
  // which Listener::open tuned, so no accept path sets them per connection.
  const auto option = [fd = accepted[0]](int level, int name) {
    int value = -1;
    socklen_t size = sizeof value;
    REQUIRE(::getsockopt(fd, level, name, &value, &size) == 0);
    return value;
  };
  CHECK(option(IPPROTO_TCP, TCP_NODELAY) == 1);
  CHECK(option(SOL_SOCKET, SO_KEEPALIVE) == 1);
  CHECK(option(IPPROTO_TCP, TCP_KEEPIDLE) == 60);
  CHECK(option(IPPROTO_TCP, TCP_KEEPINTVL) == 10);
  CHECK(option(IPPROTO_TCP, TCP_KEEPCNT) == 6);
  CHECK(option(IPPROTO_TCP, TCP_NOTSENT_LOWAT) == 0);
  // tuneSocket's optional TCP_NOTSENT_LOWAT is per socket.
  ot::relayd::tuneSocket(accepted[0], 16384);
  CHECK(option(IPPROTO_TCP, TCP_NOTSENT_LOWAT) == 16384);

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
      &loop, ot::testing::loopbackListenAddress(), "test",
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
  for (int i = 0; i < 3; ++i) clients.push_back(ot::testing::connectLoopback(port));
  for (int fd : clients) REQUIRE(fd >= 0);
  drain(&loop);  // ends: the destroyed listener closed its handles
  CHECK(calls == 1);
  CHECK(listener == nullptr);
  CHECK(ot::testing::connectLoopback(port) == -1);  // the port is closed
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
// anything else names the step that failed, and a failure also writes what the child saw to
// stderr. The limit on descriptors never touches this process.
namespace {

enum ChildFailure {
  kOpenFailed = 10,
  kConnectFailed,
  kLimitFailed,
  kNoEmfile,
  kTimedOut,
  kWrongAcceptCount,
  kWrongEmfileCount,
  kNotQueued,
};

uint64_t monotonicMs() {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<uint64_t>(now.tv_sec) * 1000 + static_cast<uint64_t>(now.tv_nsec) / 1'000'000;
}

// The descriptors this process has open, read from /proc/self/fd so one inherited at any number
// counts (the directory's own descriptor left out); empty if it cannot be read.
std::vector<int> openDescriptors() {
  std::vector<int> fds;
  DIR* directory = ::opendir("/proc/self/fd");
  if (directory == nullptr) return fds;
  const int own = ::dirfd(directory);
  while (const dirent* entry = ::readdir(directory)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    const int fd = std::atoi(entry->d_name);
    if (fd != own) fds.push_back(fd);
  }
  ::closedir(directory);
  return fds;
}

// The listening descriptor bound to `port`, found among this process's descriptors.
int findListeningFd(uint16_t port) {
  for (const int fd : openDescriptors()) {
    int accepting = 0;
    socklen_t size = sizeof accepting;
    if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &size) != 0 || accepting == 0) {
      continue;
    }
    sockaddr_storage local{};
    socklen_t length = sizeof local;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) != 0) continue;
    if (local.ss_family == AF_INET &&
        ntohs(reinterpret_cast<const sockaddr_in*>(&local)->sin_port) == port) {
      return fd;
    }
  }
  return -1;
}

// How many finished handshakes wait in the listener's accept queue (TCP_INFO reports the queue
// length as tcpi_unacked on a listening socket).
int acceptQueueLength(int listeningFd) {
  tcp_info info{};
  socklen_t size = sizeof info;
  if (::getsockopt(listeningFd, IPPROTO_TCP, TCP_INFO, &info, &size) != 0) return -1;
  return static_cast<int>(info.tcpi_unacked);
}

void reportChild(const char* step, int accepted, double emfiles, uint64_t elapsedMs, int queued) {
  char line[256];
  const int length =
      std::snprintf(line, sizeof line,
                    "emfile child: %s accepted=%d emfile_count=%.0f elapsed_ms=%llu "
                    "accept_queue=%d\n",
                    step, accepted, emfiles, static_cast<unsigned long long>(elapsedMs), queued);
  if (length > 0) (void)!::write(STDERR_FILENO, line, static_cast<size_t>(length));
}

int runEmfileScenario() {
  const uint64_t startMs = monotonicMs();
  uv_loop_t loop;
  if (uv_loop_init(&loop) != 0) return kOpenFailed;
  ot::metrics::Metrics registry;
  ot::relayd::RelayMetrics metrics(registry);
  constexpr int kClients = 3;
  int accepted = 0;
  std::unique_ptr<Listener> listener;
  auto opened = Listener::open(
      &loop, ot::testing::loopbackListenAddress(), "emfile",
      [&](int fd, const sockaddr_storage&) {
        ::close(fd);
        if (++accepted == kClients) listener->close();
      },
      &metrics);
  if (!opened.ok()) return kOpenFailed;
  listener = std::move(opened).value();
  const int listeningFd = findListeningFd(listener->port());
  if (listeningFd < 0) return kOpenFailed;

  std::vector<int> clients;
  for (int i = 0; i < kClients; ++i) {
    const int fd = ot::testing::connectLoopback(listener->port());
    if (fd < 0) return kConnectFailed;
    clients.push_back(fd);
  }
  // connect() returns once the client side is established; the server side joins the accept
  // queue when the last ACK is processed, which a loaded machine may delay. Every connection
  // must be queued before descriptors run out, or the scenario tests the handshake instead.
  while (acceptQueueLength(listeningFd) < kClients) {
    if (monotonicMs() - startMs > 30'000) {
      reportChild("connections never queued", 0, 0, monotonicMs() - startMs,
                  acceptQueueLength(listeningFd));
      return kNotQueued;
    }
    ::usleep(1000);
  }
  // Lower the limit to two above the highest descriptor in use, then fill every free slot below
  // it (the holes and the one slot above the highest), so the next descriptor the process asks
  // for fails with EMFILE and closing the fillers frees at least one. Without that spare slot a
  // process whose descriptors are contiguous (no inherited high descriptor, as under CI) has
  // nothing to free and accept fails for ever.
  const std::vector<int> open = openDescriptors();
  if (open.empty()) return kLimitFailed;
  const int highest = *std::max_element(open.begin(), open.end());
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return kLimitFailed;
  limit.rlim_cur = static_cast<rlim_t>(highest) + 2;
  if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) return kLimitFailed;
  std::vector<int> fillers;
  while (true) {
    const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) break;
    fillers.push_back(fd);
  }
  if (errno != EMFILE || fillers.empty()) return kLimitFailed;

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
  // The deadline counts from here, not from uv_loop_init: the loop's cached time is refreshed
  // first so time spent connecting above is not charged to the loop.
  uv_update_time(&loop);
  uv_timer_start(
      &watch.deadline,
      [](uv_timer_t* handle) {
        static_cast<Watch*>(handle->data)->timedOut = true;
        uv_stop(handle->loop);
      },
      30'000, 0);
  uv_unref(reinterpret_cast<uv_handle_t*>(&watch.deadline));  // does not keep the loop alive

  uv_run(&loop, UV_RUN_DEFAULT);
  const uint64_t elapsedMs = monotonicMs() - startMs;
  const double emfiles = metrics.acceptEmfile.Value();
  // The listener closed its descriptor after the last accept; before that it is still queried.
  const int queued = accepted < kClients ? acceptQueueLength(listeningFd) : 0;
  int failure = 0;
  const char* step = "";
  if (watch.timedOut) {
    failure = kTimedOut;
    step = "timed out";
  } else if (!fillers.empty()) {
    failure = kNoEmfile;
    step = "no EMFILE seen";
  } else if (accepted != kClients) {
    failure = kWrongAcceptCount;
    step = "wrong accept count";
  } else if (emfiles != 1) {
    failure = kWrongEmfileCount;
    step = "wrong EMFILE count";
  }
  if (failure != 0) reportChild(step, accepted, emfiles, elapsedMs, queued);
  return failure;
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
