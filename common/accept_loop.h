// The accept path both daemons share: a net::ListenSocket watched by a uv_poll_t that accepts by
// itself (up to 64 per readiness event, so one listener cannot starve the loop), and pauses for
// `pauseMs` when accept fails, instead of spinning on a backlog it cannot take: running out of
// descriptors (EMFILE, ENFILE, ENOBUFS, ENOMEM) makes every accept fail at once, and an unknown
// error is likely to repeat. The owner counts and logs failures (each daemon has its own metric
// labels and log line) through `onFailure`, which runs before the pause starts; a failure of the
// poll itself is reported and pauses the same way.
//
// Loop thread only. Handles live in a heap part that the last close callback frees, so the loop
// may be closed or destroyed at any time, also from inside its own onAccept. The accepted
// descriptor belongs to `onAccept` (non-blocking, close-on-exec).
#pragma once

#include <sys/socket.h>
#include <uv.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "common/listen_socket.h"
#include "common/result.h"

namespace ot::net {

struct AcceptFailure {
  bool outOfResources = false;  // EMFILE, ENFILE, ENOBUFS, ENOMEM: metrics say error="emfile"
  int error = 0;                // errno
};

class AcceptLoop {
 public:
  using OnAccept = std::function<void(int fd, const sockaddr_storage& peer)>;
  using OnFailure = std::function<void(const AcceptFailure& failure)>;

  // Starts polling `socket` at once.
  [[nodiscard]] static Result<std::unique_ptr<AcceptLoop>> start(uv_loop_t* loop,
                                                                 ListenSocket socket,
                                                                 uint64_t pauseMs,
                                                                 OnAccept onAccept,
                                                                 OnFailure onFailure);
  ~AcceptLoop();  // close()
  AcceptLoop(const AcceptLoop&) = delete;
  AcceptLoop& operator=(const AcceptLoop&) = delete;

  // Stops accepting for pauseMs (a server with several listeners pauses them all when one runs
  // out of descriptors). A no-op while paused or closed.
  void pause();
  [[nodiscard]] bool paused() const;
  // Stops accepting and closes the listening socket (idempotent). Connections already accepted
  // are not affected.
  void close();

  // The listening socket; an empty one once closed.
  [[nodiscard]] const ListenSocket& socket() const;

 private:
  struct Impl;
  explicit AcceptLoop(Impl* impl) : impl_(impl) {}
  Impl* impl_;  // freed by its last close callback; nullptr once close() ran
};

}  // namespace ot::net
