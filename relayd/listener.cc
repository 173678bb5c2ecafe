#include "relayd/listener.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <cstring>

#include "common/accept_loop.h"
#include "common/listen_socket.h"
#include "common/log.h"
#include "common/log_throttle.h"
#include "common/peer_endpoint.h"
#include "relayd/relay_metrics.h"

namespace ot::relayd {
namespace {

constexpr uint64_t kPauseMs = 500;
constexpr uint64_t kLogEveryMs = 10'000;

}  // namespace

// The state the accept loop's failure callback reaches; its own heap part, as the callback may
// run while the Listener is being destroyed from inside onAccept (nothing runs after that).
struct Listener::Impl {
  uv_loop_t* loop = nullptr;
  std::string name;
  RelayMetrics* metrics = nullptr;
  LogThrottle logThrottle{kLogEveryMs};
  log::Logger log{"relayd.listener"};
  std::unique_ptr<net::AcceptLoop> accept;

  void onFailure(const net::AcceptFailure& failure) {
    if (failure.outOfResources) {
      if (metrics != nullptr) metrics->acceptEmfile.Increment();
      logRateLimited("accept paused: out of descriptors or memory", failure.error);
    } else {
      if (metrics != nullptr) metrics->acceptOther.Increment();
      logRateLimited("accept failed", failure.error);
    }
  }

  void logRateLimited(const char* message, int error) {
    uint64_t suppressed = 0;
    if (!logThrottle.allow(uv_now(loop), suppressed)) return;
    log.warn(message,
             {{"listener", name}, {"error", std::strerror(error)}, {"suppressed", suppressed}});
  }
};

Result<std::unique_ptr<Listener>> Listener::open(uv_loop_t* loop,
                                                 const config::ListenAddress& address,
                                                 std::string name, OnAccept onAccept,
                                                 RelayMetrics* metrics) {
  auto socket = net::ListenSocket::open(address);
  if (!socket.ok()) {
    return Error{socket.error().kind, "listener " + name + ": " + socket.error().message};
  }
  const uint16_t port = socket->port();
  // Set once here, the options reach every accepted socket: Linux copies them from the listener
  // (TCP_NODELAY, SO_KEEPALIVE and the keepalive timings). That is five setsockopt calls fewer on
  // each accept, which in a reconnect storm is paid for every connection relayd turns away too.
  tuneSocket(socket->fd());
  auto impl = std::make_unique<Impl>();
  impl->loop = loop;
  impl->name = name;
  impl->metrics = metrics;
  Impl* state = impl.get();
  auto accept = net::AcceptLoop::start(
      loop, std::move(socket).value(), kPauseMs,
      [onAccept = std::move(onAccept)](int fd, const sockaddr_storage& peer) {
        onAccept(fd, peer);
      },
      [state](const net::AcceptFailure& failure) { state->onFailure(failure); });
  if (!accept.ok()) return accept.error();
  impl->accept = std::move(accept).value();

  std::unique_ptr<Listener> listener(new Listener(std::move(impl)));
  listener->port_ = port;
  listener->name_ = std::move(name);
  return listener;
}

Listener::Listener(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Listener::~Listener() = default;

void Listener::close() {
  if (impl_) impl_->accept->close();
}

std::string formatSocketAddress(const sockaddr_storage& address) {
  return PeerEndpoint::fromSocket(address).toString();
}

void tuneSocket(int fd, int notSentLowat) {
  const int one = 1;
  const int idle = 60;
  const int interval = 10;
  const int probes = 6;
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  (void)::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
  if (notSentLowat > 0) {
    (void)::setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &notSentLowat, sizeof notSentLowat);
  }
}

}  // namespace ot::relayd
