// The mesh feed's loop side (docs/mesh.md "The control-session feed"): owns the RouteFeed, which
// observes the mesh node's bridge table, batches its changes for kBatchMs on the node's loop and
// hands each delta to the sink (every relay session that has its snapshot), and serves snapshot
// requests (a relay session that started, or relayd asking after a gap): the pending changes go
// out as a delta first, then the snapshot at that version, so every session sees snapshot V and
// then V+1, V+2, ... with no gap. The sink never blocks (RelayHub queues to session outboxes).
//
// Threads: construct, setSink and start before the loop runs; requestSnapshot from any thread;
// everything else on the loop thread.
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "controld/mesh/route_feed.h"

namespace ot::mesh {

struct RouteFeedSink {
  // A delta for every relay session that has had its snapshot.
  std::function<void(const FeedDelta&)> delta;
  // A snapshot for the session of relay `relayKey` (dropped when it is gone).
  std::function<void(const std::string& relayKey, const FeedSnapshot&)> snapshot;
};

class RouteFeedPump final : public TableObserver {
 public:
  static constexpr uint64_t kBatchMs = 10;

  explicit RouteFeedPump(BridgeTable& table);
  ~RouteFeedPump();
  RouteFeedPump(const RouteFeedPump&) = delete;
  RouteFeedPump& operator=(const RouteFeedPump&) = delete;

  void setSink(RouteFeedSink sink) { sink_ = std::move(sink); }
  void start(uv_loop_t* loop);
  // Loop thread: closes the handles; later changes and requests are dropped.
  void close();

  // Loop thread: `machineId`'s forwards are believed (a link came up) or not (its link ended and
  // it is not held, or it was dropped).
  void linked(const std::string& machineId, bool up);
  // Any thread.
  void requestSnapshot(std::string relayKey);
  // Loop thread. While held, snapshot requests wait (the relay keeps forwarding by the copy it
  // has): a new controld life holds them until its links are settled, so a relayd that kept its
  // copy across the restart is not handed a table without its peers (docs/mesh.md "The
  // control-session feed"). Releasing serves the waiting requests.
  void holdSnapshots(bool held);

  [[nodiscard]] const RouteFeed& feed() const { return feed_; }

  // TableObserver: to the feed, then the batch timer.
  void machineCleared(const MachineLife& life) override;
  void bridgeAdded(const std::string& machineId, const BridgeEntry& bridge,
                   int64_t attachedAtMs) override;
  void bridgeRemoved(const std::string& machineId, std::string_view bridgeId) override;
  void machineDraining(const std::string& machineId, bool draining) override;
  void machineDropped(const std::string& machineId) override;

 private:
  void arm();
  void flush();
  void serveRequests();

  BridgeTable& table_;
  RouteFeed feed_;
  RouteFeedSink sink_;
  uv_timer_t timer_{};
  uv_async_t wake_{};
  bool running_ = false;  // loop thread
  bool armed_ = false;
  bool held_ = false;  // loop thread

  std::mutex mutex_;
  std::vector<std::string> requests_;  // under mutex_
  bool open_ = false;                  // under mutex_: wake_ may be sent
};

}  // namespace ot::mesh
