// The frames waiting to be written to one peer (docs/mesh.md, "Link frames"), with the bound that
// disconnects a peer that falls kMaxFramesBehind frames behind, and the idle rule that says when a
// ping is due. Pure: no socket, time passed in.
//
// Who calls it (once wired): the mesh link loop, one queue per link, on the thread that owns the
// link. Announcements are pushed as encoded frames (encodeFrame, encodeSnapshot); the writer takes
// from the front. When push() answers false the link is closed and its queue dropped; the peer
// reconnects and gets a fresh snapshot, which is what "starts over" means.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>

#include "controld/mesh/mesh_types.h"

namespace ot::mesh {

class OutboundQueue {
 public:
  // `nowMs`: when the link came up (the ping clock starts there).
  explicit OutboundQueue(int64_t nowMs, size_t maxFrames = kMaxFramesBehind)
      : maxFrames_(maxFrames), lastPushAtMs_(nowMs) {}

  // Queues one encoded frame. false (and nothing queued) when maxFrames are already waiting: the
  // peer is too far behind and the caller closes the link.
  [[nodiscard]] bool push(std::string frame, int64_t nowMs);

  [[nodiscard]] bool empty() const { return frames_.empty(); }
  [[nodiscard]] size_t frames() const { return frames_.size(); }
  [[nodiscard]] size_t bytes() const { return bytes_; }
  [[nodiscard]] bool overflowed() const { return overflowed_; }

  // The writer's side: the oldest frame, then pop() once it is written.
  [[nodiscard]] const std::string& front() const { return frames_.front(); }
  void pop();

  // Nothing pushed for `pingMs` (MESH_PING_MS): the link is idle and a ping should go out.
  [[nodiscard]] bool pingDue(int64_t nowMs, int64_t pingMs) const {
    return nowMs - lastPushAtMs_ >= pingMs;
  }

 private:
  size_t maxFrames_;
  std::deque<std::string> frames_;
  size_t bytes_ = 0;
  int64_t lastPushAtMs_;
  bool overflowed_ = false;
};

}  // namespace ot::mesh
