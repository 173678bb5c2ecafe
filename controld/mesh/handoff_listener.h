// controld's end of MESH_HANDOFF_SOCKET (docs/mesh.md "Who listens, who links, who forwards"):
// a SOCK_SEQPACKET unix socket (mode 0600) relayd connects to and hands over, one message each,
// the internal-listener connections that are controld's (common/fd_handoff.h). uv_poll on the
// raw descriptors: the listening one (accepting relayd's channels) and each channel (reading
// handoffs until none is left). Loop thread only; the callback owns each received descriptor.
#pragma once

#include <uv.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/fd_handoff.h"
#include "common/result.h"

namespace ot::mesh {

class HandoffListener {
 public:
  // `onHandoff` takes the connection (its fd is the callee's); `onInvalid` counts a malformed
  // message (its descriptor already closed).
  HandoffListener(uv_loop_t* loop, std::function<void(ReceivedHandoff)> onHandoff,
                  std::function<void()> onInvalid);
  ~HandoffListener();
  HandoffListener(const HandoffListener&) = delete;
  HandoffListener& operator=(const HandoffListener&) = delete;

  // Removes a stale socket file at `path`, binds, sets mode 0600 and listens.
  [[nodiscard]] Status listen(const std::string& path);
  // Stops polling and closes every descriptor (the handles close on the loop's next turn); the
  // socket file is removed.
  void close();

 private:
  struct Channel {
    HandoffListener* owner = nullptr;
    uv_poll_t poll{};
    int fd = -1;
  };

  static void onListenReadable(uv_poll_t* poll, int status, int events);
  static void onChannelReadable(uv_poll_t* poll, int status, int events);
  void closeChannel(Channel* channel);

  uv_loop_t* loop_;
  std::function<void(ReceivedHandoff)> onHandoff_;
  std::function<void()> onInvalid_;
  std::string path_;
  int listenFd_ = -1;
  uv_poll_t listenPoll_{};
  bool polling_ = false;
  std::vector<Channel*> channels_;
};

}  // namespace ot::mesh
