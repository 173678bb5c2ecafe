// The CA cool-down shared by every machine (rules in ca_cooldown.h). The state is one meta row,
// kCaCooldownMetaKey, changed only by compare-and-set, so outcomes reported on several machines
// at once all count. The job runner asks pausedUntil() before it claims jobs (a cached read, at
// most one store read per cache_ms per machine) and reports each Issuer call's result with
// recordSuccess()/recordFailure() (a fresh read and, when the state changes, a write).
//
// Storage trouble never blocks issuance: a failed read keeps the last known state (none at
// first), a failed write is logged and dropped.
//
// Threads: every method may be called from any thread (the runner's loop and its job threads).
// The store must outlive the gate.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "common/clock.h"
#include "controld/issuance/ca_cooldown.h"
#include "controld/issuance/issuer.h"
#include "controld/store/store.h"

namespace ot::controld {

struct CaCooldownGateOptions {
  Clock nowMs;               // Unix ms; the system clock when empty
  int64_t cacheMs = 15'000;  // how stale pausedUntil() may be
  int writeAttempts = 5;     // compare-and-set rounds against other writers
  // Called once each time this machine starts a cool-down (opentunnel_acme_cooldowns_total).
  std::function<void()> onStarted;
};

class CaCooldownGate {
 public:
  CaCooldownGate(MetaStore& store, CaCooldownGateOptions options);
  CaCooldownGate(const CaCooldownGate&) = delete;
  CaCooldownGate& operator=(const CaCooldownGate&) = delete;

  // The end of the cool-down (Unix ms) while one lasts, nullopt otherwise.
  [[nodiscard]] std::optional<int64_t> pausedUntil();
  // An Issuer call succeeded: the cool-down (if any) ends for every machine.
  void recordSuccess();
  // An Issuer call failed (not cancelled) with `detail`.
  void recordFailure(const FailureDetail& detail);

  // The state as last read or written (tests, logs).
  [[nodiscard]] CaCooldownState known();

 private:
  enum class Report { kSuccess, kFailure };
  void record(Report report, const FailureDetail& detail);
  void remember(const CaCooldownState& state, int64_t nowMs);
  [[nodiscard]] int64_t now() const;

  MetaStore& store_;
  CaCooldownGateOptions options_;
  std::mutex mutex_;
  CaCooldownState known_;            // guarded by mutex_
  std::optional<int64_t> readAtMs_;  // guarded by mutex_; when known_ was last read or written
};

}  // namespace ot::controld
