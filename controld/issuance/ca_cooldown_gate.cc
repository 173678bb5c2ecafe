#include "controld/issuance/ca_cooldown_gate.h"

#include <utility>

#include "common/clock.h"
#include "common/log.h"

namespace ot::controld {
namespace {

const log::Logger kCaCooldownGateLog("controld.acme");

}  // namespace

CaCooldownGate::CaCooldownGate(MetaStore& store, CaCooldownGateOptions options)
    : store_(store), options_(std::move(options)) {
  if (options_.writeAttempts < 1) options_.writeAttempts = 1;
  if (options_.cacheMs < 0) options_.cacheMs = 0;
}

int64_t CaCooldownGate::now() const {
  if (options_.nowMs) return options_.nowMs();
  return unixNowMs();
}

void CaCooldownGate::remember(const CaCooldownState& state, int64_t nowMs) {
  const std::lock_guard lock(mutex_);
  known_ = state;
  readAtMs_ = nowMs;
}

CaCooldownState CaCooldownGate::known() {
  const std::lock_guard lock(mutex_);
  return known_;
}

std::optional<int64_t> CaCooldownGate::pausedUntil() {
  const int64_t nowMs = now();
  bool fresh = false;
  {
    const std::lock_guard lock(mutex_);
    // A clock that went backwards also refreshes.
    fresh = readAtMs_ && nowMs >= *readAtMs_ && nowMs - *readAtMs_ < options_.cacheMs;
  }
  if (!fresh) {
    auto stored = store_.getMeta(kCaCooldownMetaKey);
    if (stored) {
      CaCooldownState state;
      if (*stored) {
        // An unreadable row pauses nothing; the next report overwrites it.
        state = decodeCaCooldown(**stored).value_or(CaCooldownState{});
      }
      remember(state, nowMs);
    } else {
      kCaCooldownGateLog.warn("cannot read the CA cool-down; using the last known state",
                              {{"error", stored.error().message}});
      const std::lock_guard lock(mutex_);
      readAtMs_ = nowMs;  // not again before cache_ms: the database has trouble enough
    }
  }
  const std::lock_guard lock(mutex_);
  if (known_.activeAt(nowMs)) return known_.untilMs;
  return std::nullopt;
}

void CaCooldownGate::recordSuccess() {
  record(Report::kSuccess, FailureDetail{});
}

void CaCooldownGate::recordFailure(const FailureDetail& detail) {
  // Nothing the CA is to blame for: no read, no write.
  if (!detail.pointsAtCa && !detail.rateLimited) return;
  record(Report::kFailure, detail);
}

void CaCooldownGate::record(Report report, const FailureDetail& detail) {
  for (int round = 0; round < options_.writeAttempts; ++round) {
    const int64_t nowMs = now();
    auto stored = store_.getMeta(kCaCooldownMetaKey);
    if (!stored) {
      kCaCooldownGateLog.warn("cannot read the CA cool-down; this outcome is not counted",
                              {{"error", stored.error().message}});
      return;
    }
    CaCooldownState state;
    if (*stored) state = decodeCaCooldown(**stored).value_or(CaCooldownState{});
    const CaCooldownStep step = report == Report::kSuccess
                                    ? caCooldownAfterSuccess(state, nowMs)
                                    : caCooldownAfterFailure(state, detail, nowMs);
    const std::string text = encodeCaCooldown(step.next);
    if (*stored && **stored == text) {
      remember(step.next, nowMs);
      return;
    }
    if (!*stored && step.next == CaCooldownState{}) {
      remember(step.next, nowMs);
      return;
    }
    auto written = *stored ? store_.compareAndSetMeta(kCaCooldownMetaKey, **stored, text)
                           : store_.insertMetaIfAbsent(kCaCooldownMetaKey, text);
    if (!written) {
      kCaCooldownGateLog.warn("cannot write the CA cool-down; this outcome is not counted",
                              {{"error", written.error().message}});
      return;
    }
    if (!*written) continue;  // another machine wrote first: apply the outcome to its state
    remember(step.next, nowMs);
    if (step.started) {
      kCaCooldownGateLog.warn("the CA keeps failing; pausing new certificate issuance",
                              {{"paused_ms", step.next.untilMs - nowMs},
                               {"until_ms", step.next.untilMs},
                               {"cooldown_level", step.next.level},
                               {"reason", detail.reason},
                               {"rate_limited", detail.rateLimited},
                               {"retry_after_ms", detail.retryAfterMs}});
      if (options_.onStarted) options_.onStarted();
    } else if (step.ended) {
      kCaCooldownGateLog.info("a certificate was issued; the CA cool-down is over");
    }
    return;
  }
  kCaCooldownGateLog.warn("the CA cool-down kept changing underneath; this outcome is not counted");
}

}  // namespace ot::controld
