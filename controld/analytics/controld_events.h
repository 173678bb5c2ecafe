// controld's analytics events (docs/analytics.md): built where they happen (the API's tunnel
// service, the issuance jobs, the relay hub) and handed to an analytics::EventSink, which queues
// them for controld's sender thread (common/analytics/analytics_sender.h). Pure builders: the
// hooks stay one line each.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/analytics/analytics_event.h"
#include "controld/issuance/job_runner.h"
#include "controld/relays/bridge_registry.h"
#include "controld/store/store.h"
#include "opentunnel/control/v1/control.pb.h"

namespace ot::controld {

// tunnel.created: data {chosen_id}: whether the client asked for the ID.
[[nodiscard]] analytics::Event tunnelCreatedEvent(const std::string& tunnelId, bool chosenId,
                                                  int64_t nowMs);
// tunnel.deleted: no data.
[[nodiscard]] analytics::Event tunnelDeletedEvent(const std::string& tunnelId, int64_t nowMs);
// certificate.issued for a job done; certificate.failed for an attempt that failed (retrying
// true: it will be tried again) or was refused; nothing for the other outcomes (abandoned,
// deferred, dropped: no attempt's result). data {kind, attempt, duration_ms, ...}.
[[nodiscard]] std::optional<analytics::Event> certificateEvent(const Job& job, JobOutcome outcome,
                                                               double seconds, int64_t nowMs);
// bridge.attached: data {bridge, routes, profile, max_conns} (no client address).
[[nodiscard]] analytics::Event bridgeAttachedEvent(const BridgeEntry& bridge, int64_t nowMs);
// bridge.detached at relayd's detach time: data {bridge, reason}.
[[nodiscard]] analytics::Event bridgeDetachedEvent(
    const ::opentunnel::control::v1::BridgeDetached& detached, int64_t nowMs);
// "client_close" for DETACH_REASON_CLIENT_CLOSE, ...; "unspecified" for anything unknown.
[[nodiscard]] std::string detachReasonWord(::opentunnel::control::v1::DetachReason reason);

}  // namespace ot::controld
