#include "controld/analytics/controld_events.h"

#include <cctype>
#include <string_view>
#include <utility>

namespace ot::controld {
namespace {

namespace cv1 = ::opentunnel::control::v1;
using analytics::Event;

// Error texts go out with the event, cut so one chatty CA answer cannot fill a batch.
constexpr size_t kMaxErrorChars = 200;

}  // namespace

Event tunnelCreatedEvent(const std::string& tunnelId, bool chosenId, int64_t nowMs) {
  Event event{analytics::type::kTunnelCreated, nowMs, tunnelId, {}};
  event.add("chosen_id", chosenId);
  return event;
}

Event tunnelDeletedEvent(const std::string& tunnelId, int64_t nowMs) {
  return Event{analytics::type::kTunnelDeleted, nowMs, tunnelId, {}};
}

std::optional<Event> certificateEvent(const Job& job, JobOutcome outcome, double seconds,
                                      int64_t nowMs) {
  const bool issued = outcome == JobOutcome::kDone;
  const bool failed = outcome == JobOutcome::kRetry || outcome == JobOutcome::kFailed ||
                      outcome == JobOutcome::kRefused;
  if (!issued && !failed) return std::nullopt;
  Event event{issued ? analytics::type::kCertificateIssued : analytics::type::kCertificateFailed,
              nowMs,
              job.tunnelId,
              {}};
  event.add("kind", std::string(jobKindName(job.kind)));
  event.add("certificate", job.id);
  event.add("attempt", static_cast<int64_t>(job.attempts));
  event.add("duration_ms", static_cast<int64_t>(seconds * 1000.0));
  if (failed) {
    event.add("retrying", outcome == JobOutcome::kRetry);
    event.add("refused", outcome == JobOutcome::kRefused);
    event.add("error", job.lastError.substr(0, kMaxErrorChars));
  }
  return event;
}

Event bridgeAttachedEvent(const BridgeEntry& bridge, int64_t nowMs) {
  Event event{analytics::type::kBridgeAttached, nowMs, bridge.tunnelId, {}};
  event.add("bridge", bridge.bridgeId);
  event.add("routes", static_cast<int64_t>(bridge.routes.size()));
  event.add("profile", bridge.profile);
  event.add("max_conns", static_cast<int64_t>(bridge.maxConns));
  return event;
}

Event bridgeDetachedEvent(const cv1::BridgeDetached& detached, int64_t nowMs) {
  const int64_t at = detached.detached_at_unix_ms() > 0 ? detached.detached_at_unix_ms() : nowMs;
  Event event{analytics::type::kBridgeDetached, at, detached.tunnel_id(), {}};
  event.add("bridge", detached.bridge_id());
  event.add("reason", detachReasonWord(detached.reason()));
  return event;
}

std::string detachReasonWord(cv1::DetachReason reason) {
  constexpr std::string_view kPrefix = "DETACH_REASON_";
  const std::string& name = cv1::DetachReason_Name(reason);
  if (!std::string_view(name).starts_with(kPrefix)) return "unspecified";
  std::string word = name.substr(kPrefix.size());
  for (char& c : word) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return word;
}

}  // namespace ot::controld
