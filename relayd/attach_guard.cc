#include "relayd/attach_guard.h"

#include "common/ip_address.h"
#include "common/log.h"

namespace ot::relayd {

namespace {
const log::Logger kAttachGuardLog("relayd.attach");
}  // namespace

std::optional<uint64_t> AttachGuard::refuse(const std::string& peerAddress, uint64_t nowMs) {
  const std::optional<std::string> source = sourceKey(peerAddress);
  if (!source) return std::nullopt;
  const std::optional<SourceFailures::Refusal> refusal = failures_.refuse(*source, nowMs);
  if (!refusal) return std::nullopt;
  if (refusal->logWithSuppressed) {
    kAttachGuardLog.warn("refusing attaches from a source that failed too often",
                         {{"source", *source},
                          {"retry_after_ms", refusal->retryAfterMs},
                          {"suppressed", *refusal->logWithSuppressed}});
  }
  return refusal->retryAfterMs;
}

void AttachGuard::failed(const std::string& peerAddress, const std::string& tunnelId,
                         uint64_t nowMs) {
  const std::optional<std::string> source = sourceKey(peerAddress);
  if (!source) return;  // no address (a PROXY header without one): nothing to count it under
  const SourceFailures::Recorded recorded = failures_.recordFailure(*source, nowMs);
  if (!recorded.logWithSuppressed) return;
  kAttachGuardLog.warn(recorded.nowRefused
                           ? "attach failures: source refused for the rest of its window"
                           : "attach failed: bad token",
                       {{"source", *source},
                        {"tunnel", tunnelId},
                        {"failures_in_window", recorded.failuresInWindow},
                        {"suppressed", *recorded.logWithSuppressed}});
}

}  // namespace ot::relayd
