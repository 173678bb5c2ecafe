// relayd's machine-wide figures for controld's admin stats (RelayStats in control.proto,
// docs/api.md "Admin"): read from the metrics relayd already keeps, so the admin stats and
// /metrics never disagree. The control session's writer sends them with Counters when they
// changed (control_session.cc).
#pragma once

#include <cstdint>

#include "opentunnel/control/v1/control.pb.h"
#include "relayd/relay_metrics.h"

namespace ot::relayd {

// Any thread: prometheus-cpp counters and gauges are atomics, read without the loop. taken_at is
// left 0 (the sender sets it, so that two readings compare equal when nothing moved).
[[nodiscard]] ::opentunnel::control::v1::RelayStats readRelayStats(const RelayMetrics& metrics);

// Equal figures (taken_at aside): nothing to send.
[[nodiscard]] bool sameRelayStats(const ::opentunnel::control::v1::RelayStats& a,
                                  const ::opentunnel::control::v1::RelayStats& b);

}  // namespace ot::relayd
