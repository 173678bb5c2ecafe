// When a new life of this machine's mesh node may link (docs/mesh.md "A controld restart drops no
// tunnel", step 6): not before its relayd's first session snapshot reached it, so the first mesh
// snapshot peers get from it carries this machine's bridges and replaces what they held without a
// gap; or, with no relayd session at all, once `waitMs` passed since start (a machine whose relayd
// is down still links, with no bridges). Links relayd hands over meanwhile are kept (up to
// kMaxPreAuthConnections; the dialer waits within its handshake limit) and given back when the gate
// opens. Pure: time is passed in; the descriptors kept are the caller's to adopt or close.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "common/fd_handoff.h"

namespace ot::mesh {

class LinkGate {
 public:
  LinkGate(int64_t startMs, int64_t waitMs) : opensAtLatestMs_(startMs + waitMs) {}

  [[nodiscard]] bool open() const { return open_; }
  // Opens the gate if it is due: the first relayd snapshot came (`relaySnapshot`), or the wait
  // passed. The reason it opened now (relay_snapshot, no_relay_session), or nullopt.
  [[nodiscard]] std::optional<std::string_view> update(int64_t nowMs, bool relaySnapshot);
  // Keeps a handed-over link while closed. False: the gate is open or holds the most it may; the
  // caller handles the link itself.
  [[nodiscard]] bool defer(ReceivedHandoff& received);
  // The links kept while closed, oldest first (once open, or to close them at shutdown).
  [[nodiscard]] std::vector<ReceivedHandoff> takeDeferred();
  [[nodiscard]] size_t deferred() const { return deferred_.size(); }

 private:
  int64_t opensAtLatestMs_;
  bool open_ = false;
  std::vector<ReceivedHandoff> deferred_;
};

}  // namespace ot::mesh
