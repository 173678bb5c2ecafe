#include "controld/issuance/ca_cooldown_gate.h"

#include <utility>

#include "common/clock.h"
#include "common/log.h"

namespace ot::controld {
namespace {

const log::Logger kLog("controld.acme");

}  // namespace

CaCooldownGate::CaCooldownGate(MetaStore& store, CaCooldownGateOptions options)
    : store_(store), options_(std::move(options)) {
  if (options_.write_attempts < 1) options_.write_attempts = 1;
  if (options_.cache_ms < 0) options_.cache_ms = 0;
}

int64_t CaCooldownGate::now() const {
  if (options_.now_ms) return options_.now_ms();
  return unixNowMs();
}

void CaCooldownGate::remember(const CaCooldownState& state, int64_t now_ms) {
  const std::lock_guard lock(mutex_);
  known_ = state;
  read_at_ms_ = now_ms;
}

CaCooldownState CaCooldownGate::known() {
  const std::lock_guard lock(mutex_);
  return known_;
}

std::optional<int64_t> CaCooldownGate::pausedUntil() {
  const int64_t now_ms = now();
  bool fresh = false;
  {
    const std::lock_guard lock(mutex_);
    // A clock that went backwards also refreshes.
    fresh = read_at_ms_ && now_ms >= *read_at_ms_ && now_ms - *read_at_ms_ < options_.cache_ms;
  }
  if (!fresh) {
    auto stored = store_.getMeta(kCaCooldownMetaKey);
    if (stored) {
      CaCooldownState state;
      if (*stored) {
        // An unreadable row pauses nothing; the next report overwrites it.
        state = decodeCaCooldown(**stored).value_or(CaCooldownState{});
      }
      remember(state, now_ms);
    } else {
      kLog.warn("cannot read the CA cool-down; using the last known state",
                {{"error", stored.error().message}});
      const std::lock_guard lock(mutex_);
      read_at_ms_ = now_ms;  // not again before cache_ms: the database has trouble enough
    }
  }
  const std::lock_guard lock(mutex_);
  if (known_.activeAt(now_ms)) return known_.until_ms;
  return std::nullopt;
}

void CaCooldownGate::recordSuccess() {
  record(Report::kSuccess, FailureDetail{});
}

void CaCooldownGate::recordFailure(const FailureDetail& detail) {
  // Nothing the CA is to blame for: no read, no write.
  if (!detail.points_at_ca && !detail.rate_limited) return;
  record(Report::kFailure, detail);
}

void CaCooldownGate::record(Report report, const FailureDetail& detail) {
  for (int round = 0; round < options_.write_attempts; ++round) {
    const int64_t now_ms = now();
    auto stored = store_.getMeta(kCaCooldownMetaKey);
    if (!stored) {
      kLog.warn("cannot read the CA cool-down; this outcome is not counted",
                {{"error", stored.error().message}});
      return;
    }
    CaCooldownState state;
    if (*stored) state = decodeCaCooldown(**stored).value_or(CaCooldownState{});
    const CaCooldownStep step = report == Report::kSuccess
                                    ? caCooldownAfterSuccess(state, now_ms)
                                    : caCooldownAfterFailure(state, detail, now_ms);
    const std::string text = encodeCaCooldown(step.next);
    if (*stored && **stored == text) {
      remember(step.next, now_ms);
      return;
    }
    if (!*stored && step.next == CaCooldownState{}) {
      remember(step.next, now_ms);
      return;
    }
    auto written = *stored ? store_.compareAndSetMeta(kCaCooldownMetaKey, **stored, text)
                           : store_.insertMetaIfAbsent(kCaCooldownMetaKey, text);
    if (!written) {
      kLog.warn("cannot write the CA cool-down; this outcome is not counted",
                {{"error", written.error().message}});
      return;
    }
    if (!*written) continue;  // another machine wrote first: apply the outcome to its state
    remember(step.next, now_ms);
    if (step.started) {
      kLog.warn("the CA keeps failing; pausing new certificate issuance",
                {{"paused_ms", step.next.until_ms - now_ms},
                 {"until_ms", step.next.until_ms},
                 {"cooldown_level", step.next.level},
                 {"reason", detail.reason},
                 {"rate_limited", detail.rate_limited},
                 {"retry_after_ms", detail.retry_after_ms}});
      if (options_.on_started) options_.on_started();
    } else if (step.ended) {
      kLog.info("a certificate was issued; the CA cool-down is over");
    }
    return;
  }
  kLog.warn("the CA cool-down kept changing underneath; this outcome is not counted");
}

}  // namespace ot::controld
