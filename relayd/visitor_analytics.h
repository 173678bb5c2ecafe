// relayd's analytics events (docs/analytics.md "visitor.connection"): one per visitor connection a
// bridge here served (with its bytes and duration), forwarded to another machine, or turned away.
// They are built on the loop and handed to the bounded queue of relayd's own analytics sender
// (common/analytics/analytics_sender.h): the loop never encodes, never does I/O for them, and
// when the queue is full the event is dropped and counted. Why relayd has its own sender rather
// than sending them to controld over the control session: the session's outbox overflow ends the
// session, so a visitor storm could cost relayd its control session; and visitors go on while
// controld restarts, so their events should too.
#pragma once

#include <cstdint>
#include <string>

#include "relayd/relay_context.h"
#include "relayd/relay_metrics.h"

namespace ot::relayd {

// A visitor spliced onto a bridge here has closed.
void emitVisitorServed(RelayContext& context, const std::string& tunnelId, bool forwardedIn,
                       uint64_t bytesIn, uint64_t bytesOut, uint64_t durationMs);
// A visitor of a known tunnel that no bridge here carried: rejected, or forwarded to the machine
// holding its route (VisitorOutcome::kForwardedOut). Nothing for unknown tunnels: their IDs are
// whatever a visitor typed.
void emitVisitorOutcome(RelayContext& context, const std::string& tunnelId, VisitorOutcome outcome);

}  // namespace ot::relayd
