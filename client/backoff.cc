#include "client/backoff.h"

#include <uv.h>

#include <algorithm>
#include <random>
#include <utility>

#include "common/bridge_control.h"

namespace ot::client {

RetryHint classifyAttemptEnd(const AttemptEnd& end) {
  const RetryHint busy{RetryKind::kBusy, 0};
  switch (end.cause) {
    case AttemptEnd::Cause::kConnectFailed:
      // Nothing listens: the relay is between its old and its new process. Unreachable hosts,
      // timeouts and failed lookups are not known to pass soon.
      return end.uvStatus == UV_ECONNREFUSED ? busy : RetryHint{};
    case AttemptEnd::Cause::kClosedInHandshake:
      // relayd closes before the handshake when it sheds (no handshake slot) and when a draining
      // relay refuses a bridge (its ALPN says so); a broken TLS setup ends in an alert instead.
      return end.uvStatus == UV_EOF || end.uvStatus == UV_ECONNRESET || end.uvStatus == UV_EPIPE
                 ? busy
                 : RetryHint{};
    case AttemptEnd::Cause::kUpgradeRefused:
      if (end.httpStatus == 503 && end.retryAfterMs > 0)
        return {RetryKind::kBusy, end.retryAfterMs};
      return {};
    case AttemptEnd::Cause::kClosed:
      // The owner reset the tunnel: come back at once.
      if (end.closeCode == bridge::kCloseReset) return {RetryKind::kReset, 0};
      // 1012: service restart; 1013: try again later (RFC 6455's registry).
      return end.closeCode == 1012 || end.closeCode == 1013 ? busy : RetryHint{};
    case AttemptEnd::Cause::kDrain:
      return busy;
    case AttemptEnd::Cause::kTlsFailed:
    case AttemptEnd::Cause::kAttachError:
    case AttemptEnd::Cause::kOther:
      return {};
  }
  return {};
}

Backoff::Backoff(std::function<uint64_t(uint64_t)> random, uint64_t baseMs, uint64_t capMs)
    : random_(std::move(random)), baseMs_(baseMs), capMs_(capMs) {}

uint64_t Backoff::nextDelayMs() {
  // Shifting past 2^20 cannot be below the cap for any sane base; stop growing the exponent there.
  const uint32_t exponent = std::min<uint32_t>(failures_, 20);
  const uint64_t base = std::min(capMs_, baseMs_ << exponent);
  if (failures_ < UINT32_MAX) ++failures_;
  const uint64_t half = base / 2;
  return half + random_(base - half);
}

ScheduledWait Backoff::nextWait(const RetryHint& hint, bool afterAttached) {
  // Not a failure: the counts stay as they are, so a reset never lengthens a later wait.
  if (hint.kind == RetryKind::kReset) return {random_(kResetSpreadMs), WaitKind::kReset};
  if (afterAttached) return {nextDelayMs(), WaitKind::kAfterAttached};
  const bool busy = hint.kind == RetryKind::kBusy && busy_ < kBusyLimit;
  return {nextDelayMs(hint), busy ? WaitKind::kBusy : WaitKind::kBroken};
}

uint64_t Backoff::nextDelayMs(const RetryHint& hint) {
  if (hint.kind == RetryKind::kReset) return random_(kResetSpreadMs);
  if (hint.kind == RetryKind::kBroken || busy_ >= kBusyLimit) return nextDelayMs();
  const uint32_t streak = busy_++;
  if (hint.retryAfterMs > 0) {
    const uint64_t wait = std::min(hint.retryAfterMs, kRetryAfterCapMs);
    return wait + random_(wait / 2);
  }
  const uint64_t top = std::min(kBusyCapMs, kBusyFirstMs << std::min<uint32_t>(streak, 8));
  return kBusyMinMs + random_(top - kBusyMinMs);
}

uint64_t uniformRandom(uint64_t n) {
  thread_local std::mt19937_64 generator{std::random_device{}()};
  return std::uniform_int_distribution<uint64_t>(0, n)(generator);
}

}  // namespace ot::client
