#include "relayd/visitor_analytics.h"

#include <string_view>
#include <utility>

#include "common/analytics/analytics_sender.h"
#include "common/clock.h"

namespace ot::relayd {

void emitVisitorServed(RelayContext& context, const std::string& tunnelId, bool forwardedIn,
                       uint64_t bytesIn, uint64_t bytesOut, uint64_t durationMs) {
  if (context.analytics == nullptr) return;
  analytics::Event event{analytics::type::kVisitorConnection, unixNowMs(), tunnelId, {}};
  event.fields.reserve(4);  // one allocation on the loop
  event.add("outcome", std::string(forwardedIn ? "forwarded_in" : "served_local"));
  event.add("bytes_in", static_cast<int64_t>(bytesIn));
  event.add("bytes_out", static_cast<int64_t>(bytesOut));
  event.add("duration_ms", static_cast<int64_t>(durationMs));
  context.analytics->emit(std::move(event));
}

void emitVisitorOutcome(RelayContext& context, const std::string& tunnelId,
                        VisitorOutcome outcome) {
  if (context.analytics == nullptr || outcome == VisitorOutcome::kRejectedUnknownTunnel) return;
  analytics::Event event{analytics::type::kVisitorConnection, unixNowMs(), tunnelId, {}};
  event.add("outcome", std::string(visitorOutcomeName(outcome)));
  context.analytics->emit(std::move(event));
}

}  // namespace ot::relayd
