#include "common/accept_loop.h"

#include <string>
#include <utility>

namespace ot::net {
namespace {

constexpr int kAcceptsPerWakeup = 64;

}  // namespace

// Owns the listening descriptor and both handles; outlives the AcceptLoop while they close.
struct AcceptLoop::Impl {
  ListenSocket socket;  // closed (and a unix socket file removed) by closeAll()
  uint64_t pauseMs = 0;
  OnAccept onAccept;
  OnFailure onFailure;
  uv_poll_t poll{};
  uv_timer_t pauseTimer{};
  bool closing = false;
  bool paused = false;
  int openHandles = 0;

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
    if (self->openHandles == 0) delete self;
  }

  static void onReadable(uv_poll_t* handle, int status, int /*events*/) {
    auto* self = static_cast<Impl*>(handle->data);
    if (self->closing) return;
    if (status < 0) {
      self->fail(AcceptFailure{.outOfResources = false, .error = -status});
      return;
    }
    self->acceptSome();
  }

  static void onPauseOver(uv_timer_t* handle) {
    auto* self = static_cast<Impl*>(handle->data);
    if (self->closing) return;
    self->resume();
  }

  void resume() {
    paused = false;
    uv_poll_start(&poll, UV_READABLE, &Impl::onReadable);
  }

  void acceptSome() {
    for (int attempt = 0; attempt < kAcceptsPerWakeup && !closing; ++attempt) {
      sockaddr_storage peer{};
      const Accepted got = socket.accept(&peer);
      switch (got.status) {
        case AcceptStatus::kAccepted:
          onAccept(got.fd, peer);  // may close or destroy the loop: `closing` ends the batch
          continue;
        case AcceptStatus::kSkipped:
          continue;
        case AcceptStatus::kNoneWaiting:
          return;
        case AcceptStatus::kOutOfResources:
          fail(AcceptFailure{.outOfResources = true, .error = got.error});
          return;
        case AcceptStatus::kFailed:
          fail(AcceptFailure{.outOfResources = false, .error = got.error});
          return;
      }
    }
  }

  void fail(const AcceptFailure& failure) {
    if (onFailure) onFailure(failure);
    pause();
  }

  // Readable stays true while the backlog holds connections: stop polling or the loop spins.
  void pause() {
    if (closing || paused) return;
    paused = true;
    uv_poll_stop(&poll);
    uv_timer_start(&pauseTimer, &Impl::onPauseOver, pauseMs, 0);
  }
};

Result<std::unique_ptr<AcceptLoop>> AcceptLoop::start(uv_loop_t* loop, ListenSocket socket,
                                                      uint64_t pauseMs, OnAccept onAccept,
                                                      OnFailure onFailure) {
  auto impl = std::make_unique<Impl>();
  impl->socket = std::move(socket);
  impl->pauseMs = pauseMs;
  impl->onAccept = std::move(onAccept);
  impl->onFailure = std::move(onFailure);
  if (const int rc = uv_poll_init(loop, &impl->poll, impl->socket.fd()); rc != 0) {
    return Error{ErrorKind::kInternal, std::string("uv_poll_init: ") + uv_strerror(rc)};
  }
  impl->poll.data = impl.get();
  uv_timer_init(loop, &impl->pauseTimer);
  impl->pauseTimer.data = impl.get();
  impl->openHandles = 2;
  impl->resume();
  return std::unique_ptr<AcceptLoop>(new AcceptLoop(impl.release()));
}

AcceptLoop::~AcceptLoop() {
  close();
}

void AcceptLoop::pause() {
  if (impl_ != nullptr) impl_->pause();
}

bool AcceptLoop::paused() const {
  return impl_ != nullptr && impl_->paused;
}

// The heap part is freed by the handles' close callbacks once the loop runs them, so after
// close() this object must never reach it again (not even from its destructor).
void AcceptLoop::close() {
  if (impl_ == nullptr) return;
  impl_->closeAll();
  impl_ = nullptr;
}

const ListenSocket& AcceptLoop::socket() const {
  static const ListenSocket kClosed;
  return impl_ != nullptr ? impl_->socket : kClosed;
}

}  // namespace ot::net
