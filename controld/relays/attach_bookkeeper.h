// What an attach leaves to do afterwards, off its path: the tunnel's lastConnectedAt, written at
// most once an hour per tunnel, and the renewal check (a ready certificate whose renewal time has
// come gets its renewal job now, and one whose alarm was lost gets it back). The attach itself
// never waits for any of it and never fails because of it.
//
// noteAttached() runs on a relay session's reader thread for every attached delta (RelayHub's
// attached handler) and only touches memory: a tunnel whose lastConnectedAt this process wrote or
// read within the hour is skipped outright, so a reconnecting fleet costs no database work; other
// tunnels are queued once each (at most max_pending; past that they are dropped and counted). A
// background thread (or flush()) takes the queue one tunnel at a time, so bookkeeping holds at
// most one pooled connection however big a storm is: one read, at most one job insert and at
// most one conditional write (the revision read; a conflict reads again). A failed tunnel stays
// queued for the next pass. The record is not pushed to the relays: nothing they cache changed.
//
// Thread-safe. The stores and the notifier must outlive the bookkeeper.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "common/clock.h"
#include "common/periodic_task.h"
#include "common/result.h"
#include "controld/relays/record_publisher.h"
#include "controld/store/store.h"

namespace ot::controld {

inline constexpr int64_t kLastConnectedEveryMs = 3'600'000;

// What an attach at now_ms asks of a tunnel's stored record. Pure.
struct AttachFollowUp {
  bool writeLastConnected = false;    // lastConnectedAt is unset or an hour old
  std::optional<int64_t> rearmAlarm;  // a ready certificate without an alarm: its renewal time
  std::optional<Job> renewal;         // a ready certificate at or past its renewal time
};
[[nodiscard]] AttachFollowUp attachFollowUp(const TunnelRecord& record, int64_t nowMs,
                                            int64_t writeEveryMs = kLastConnectedEveryMs);

struct AttachBookkeeperOptions {
  std::chrono::milliseconds interval{1000};  // attaches gathered before a pass
  size_t maxPending = 100'000;               // tunnels queued at once
  int64_t writeEveryMs = kLastConnectedEveryMs;
  Clock nowMs;  // empty: the system clock
};

class AttachBookkeeper {
 public:
  AttachBookkeeper(TunnelStore& tunnels, JobStore& jobs, JobNotifier* notifier,
                   AttachBookkeeperOptions options = {});
  ~AttachBookkeeper();  // stop()
  AttachBookkeeper(const AttachBookkeeper&) = delete;
  AttachBookkeeper& operator=(const AttachBookkeeper&) = delete;

  // A bridge of the tunnel attached. Never blocks on the store.
  void noteAttached(const std::string& tunnelId);
  // One pass over the queue on the calling thread; the first failure (its tunnel stays queued).
  Status flush();
  // The background thread: a pass every interval, and a last one when stopped.
  void start();
  void stop();

  [[nodiscard]] size_t pending() const;
  [[nodiscard]] uint64_t dropped() const;
  [[nodiscard]] uint64_t writes() const;  // lastConnectedAt writes made

 private:
  Status followUp(const std::string& tunnelId, int64_t now);
  void remember(const std::string& tunnelId, int64_t lastConnectedAtMs);
  [[nodiscard]] int64_t nowMs() const;

  TunnelStore& tunnels_;
  JobStore& jobs_;
  JobNotifier* notifier_;
  const AttachBookkeeperOptions options_;

  mutable std::mutex mutex_;
  std::unordered_set<std::string> pending_;
  // tunnel -> its lastConnectedAt as this process last wrote or read it (pruned after the hour)
  std::unordered_map<std::string, int64_t> recent_;
  uint64_t dropped_ = 0;
  uint64_t writes_ = 0;

  std::mutex flushMutex_;  // one pass at a time
  PeriodicTask task_;      // last: stopped before the members its rounds read go
};

}  // namespace ot::controld
