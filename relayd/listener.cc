#include "relayd/listener.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <cstring>

#include "common/listen_socket.h"
#include "common/log.h"
#include "common/peer_endpoint.h"
#include "relayd/relay_metrics.h"

namespace ot::relayd {
namespace {

constexpr int kAcceptsPerWakeup = 64;
constexpr uint64_t kPauseMs = 500;
constexpr uint64_t kLogEveryMs = 10'000;

}  // namespace

// Owns the listening descriptor and both handles. Outlives the Listener when the handles are
// still closing: the last close callback frees it.
struct Listener::Impl {
  uv_loop_t* loop = nullptr;
  net::ListenSocket socket;  // closed (and a unix socket file removed) by closeAll()
  std::string name;
  OnAccept onAccept;
  RelayMetrics* metrics = nullptr;
  uv_poll_t poll{};
  uv_timer_t pauseTimer{};
  bool closing = false;
  bool orphaned = false;  // the Listener is gone: free on the last close callback
  int openHandles = 0;
  uint64_t lastLogMs = 0;
  bool loggedOnce = false;
  uint64_t unloggedErrors = 0;
  log::Logger log{"relayd.listener"};

  void closeAll() {
    if (closing) return;
    closing = true;
    uv_close(reinterpret_cast<uv_handle_t*>(&poll), &Impl::onClosed);
    uv_close(reinterpret_cast<uv_handle_t*>(&pauseTimer), &Impl::onClosed);
    // uv_close stopped the poll watcher, so the descriptor can go now.
    socket = {};
  }

  static void onClosed(uv_handle_t* handle) {
    auto* self = static_cast<Impl*>(handle->data);
    self->openHandles -= 1;
    if (self->openHandles == 0 && self->orphaned) delete self;
  }

  static void onReadable(uv_poll_t* handle, int status, int) {
    auto* self = static_cast<Impl*>(handle->data);
    if (self->closing) return;
    if (status < 0) {
      self->countOther(-status);
      return;
    }
    self->acceptSome();
  }

  static void onPauseOver(uv_timer_t* handle) {
    auto* self = static_cast<Impl*>(handle->data);
    if (self->closing) return;
    uv_poll_start(&self->poll, UV_READABLE, &Impl::onReadable);
  }

  void acceptSome() {
    for (int attempt = 0; attempt < kAcceptsPerWakeup && !closing; ++attempt) {
      sockaddr_storage peer{};
      const net::Accepted got = socket.accept(&peer);
      switch (got.status) {
        case net::AcceptStatus::kAccepted:
          onAccept(got.fd, peer);  // may close or destroy the Listener: `closing` ends the loop
          continue;
        case net::AcceptStatus::kSkipped:
          continue;
        case net::AcceptStatus::kNoneWaiting:
          return;
        case net::AcceptStatus::kOutOfResources:
          if (metrics != nullptr) metrics->acceptEmfile.Increment();
          logRateLimited("accept paused: out of descriptors or memory", got.error);
          pause();
          return;
        case net::AcceptStatus::kFailed:
          countOther(got.error);
          pause();
          return;
      }
    }
  }

  // Readable stays true while the backlog holds connections: stop polling or the loop spins.
  void pause() {
    uv_poll_stop(&poll);
    uv_timer_start(&pauseTimer, &Impl::onPauseOver, kPauseMs, 0);
  }

  void countOther(int error) {
    if (metrics != nullptr) metrics->acceptOther.Increment();
    logRateLimited("accept failed", error);
  }

  void logRateLimited(const char* message, int error) {
    const uint64_t now = uv_now(loop);
    if (loggedOnce && now - lastLogMs < kLogEveryMs) {
      unloggedErrors += 1;
      return;
    }
    log.warn(message,
             {{"listener", name}, {"error", std::strerror(error)}, {"suppressed", unloggedErrors}});
    loggedOnce = true;
    lastLogMs = now;
    unloggedErrors = 0;
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
  auto impl = std::make_unique<Impl>();
  impl->loop = loop;
  impl->socket = std::move(socket).value();
  impl->name = name;
  impl->onAccept = std::move(onAccept);
  impl->metrics = metrics;
  const int pollStatus = uv_poll_init(loop, &impl->poll, impl->socket.fd());
  if (pollStatus != 0) {
    return Error{ErrorKind::kInternal, std::string("uv_poll_init: ") + uv_strerror(pollStatus)};
  }
  impl->poll.data = impl.get();
  uv_timer_init(loop, &impl->pauseTimer);
  impl->pauseTimer.data = impl.get();
  impl->openHandles = 2;
  uv_poll_start(&impl->poll, UV_READABLE, &Impl::onReadable);

  const uint16_t port = impl->socket.port();
  std::unique_ptr<Listener> listener(new Listener(std::move(impl)));
  listener->port_ = port;
  listener->name_ = std::move(name);
  return listener;
}

Listener::Listener(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Listener::~Listener() {
  if (!impl_) return;
  impl_->closeAll();
  impl_->orphaned = true;
  if (impl_->openHandles > 0) (void)impl_.release();  // freed by its last close callback
}

void Listener::close() {
  if (impl_) impl_->closeAll();
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
