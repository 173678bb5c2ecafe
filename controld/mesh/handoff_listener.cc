#include "controld/mesh/handoff_listener.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"

namespace ot::mesh {
namespace {

const log::Logger kHandoffListenerLog("controld.mesh");

Error systemError(const std::string& what) {
  return Error{ErrorKind::kUnavailable, what + ": " + std::strerror(errno)};
}

}  // namespace

HandoffListener::HandoffListener(uv_loop_t* loop, std::function<void(ReceivedHandoff)> onHandoff,
                                 std::function<void()> onInvalid)
    : loop_(loop), onHandoff_(std::move(onHandoff)), onInvalid_(std::move(onInvalid)) {}

HandoffListener::~HandoffListener() {
  if (listenFd_ >= 0 && !polling_) ::close(listenFd_);
}

Status HandoffListener::listen(const std::string& path) {
  sockaddr_un address{};
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    return Error{ErrorKind::kInvalid, "MESH_HANDOFF_SOCKET path is empty or too long: " + path};
  }
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.data(), path.size());
  listenFd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listenFd_ < 0) return systemError("socket");
  ::unlink(path.c_str());  // a socket file left by a previous life
  // Created 0600 from the start (the umask covers the moment between bind and chmod).
  const mode_t previous = ::umask(0177);
  const int bound = ::bind(listenFd_, reinterpret_cast<const sockaddr*>(&address), sizeof(address));
  ::umask(previous);
  if (bound != 0) return systemError("bind " + path);
  path_ = path;
  if (::chmod(path.c_str(), 0600) != 0) return systemError("chmod " + path);
  if (::listen(listenFd_, 16) != 0) return systemError("listen " + path);
  if (uv_poll_init(loop_, &listenPoll_, listenFd_) != 0) return systemError("uv_poll_init");
  listenPoll_.data = this;
  polling_ = true;
  uv_poll_start(&listenPoll_, UV_READABLE, onListenReadable);
  return Ok{};
}

void HandoffListener::onListenReadable(uv_poll_t* poll, int status, int) {
  auto* self = static_cast<HandoffListener*>(poll->data);
  if (status < 0) return;
  for (;;) {
    const int fd = ::accept4(self->listenFd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EINTR) {
        kHandoffListenerLog.warn("cannot accept a handoff channel",
                                 {{"error", std::strerror(errno)}});
      }
      return;
    }
    auto* channel = new Channel{self, {}, fd};  // NOLINT: freed in closeChannel's callback
    if (uv_poll_init(self->loop_, &channel->poll, fd) != 0) {
      ::close(fd);
      delete channel;  // NOLINT
      continue;
    }
    channel->poll.data = channel;
    self->channels_.push_back(channel);
    uv_poll_start(&channel->poll, UV_READABLE, onChannelReadable);
    kHandoffListenerLog.info("relayd connected to the mesh handoff socket");
  }
}

void HandoffListener::onChannelReadable(uv_poll_t* poll, int status, int) {
  auto* channel = static_cast<Channel*>(poll->data);
  HandoffListener* self = channel->owner;
  if (status < 0) return self->closeChannel(channel);
  // A bounded batch per wakeup, so one busy channel cannot hold the loop.
  for (int i = 0; i < 64; ++i) {
    auto received = receiveHandoff(channel->fd);
    if (!received.ok()) {
      if (received.error().kind == ErrorKind::kInvalid) {
        self->onInvalid_();
        continue;
      }
      return self->closeChannel(channel);  // relayd closed its end
    }
    if (!received->has_value()) return;
    self->onHandoff_(std::move(**received));
  }
}

void HandoffListener::closeChannel(Channel* channel) {
  channels_.erase(std::remove(channels_.begin(), channels_.end(), channel), channels_.end());
  uv_poll_stop(&channel->poll);
  uv_close(reinterpret_cast<uv_handle_t*>(&channel->poll), [](uv_handle_t* handle) {
    auto* closed = static_cast<Channel*>(handle->data);
    ::close(closed->fd);
    delete closed;  // NOLINT
  });
}

void HandoffListener::close() {
  while (!channels_.empty()) closeChannel(channels_.back());
  if (polling_) {
    uv_poll_stop(&listenPoll_);
    listenPoll_.data = reinterpret_cast<void*>(static_cast<intptr_t>(listenFd_));
    uv_close(reinterpret_cast<uv_handle_t*>(&listenPoll_), [](uv_handle_t* handle) {
      ::close(static_cast<int>(reinterpret_cast<intptr_t>(handle->data)));
    });
    polling_ = false;
    listenFd_ = -1;
  } else if (listenFd_ >= 0) {
    ::close(listenFd_);
    listenFd_ = -1;
  }
  if (!path_.empty()) ::unlink(path_.c_str());
  path_.clear();
}

}  // namespace ot::mesh
