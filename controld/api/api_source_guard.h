// The API's guard per client address, around the routes (inside withTrustedProxies, so it sees
// the address a request is counted under):
//  - a client address that is not an IP address (relayd must send an address, never "ip:port")
//    is not used: the request goes on with no address, counted and logged at a bounded rate;
//  - every 401 (no bearer token, or a wrong one) counts as a failure of its source (IPv4 address,
//    IPv6 /64). A source with `limits.maxFailures` failures in `limits.windowMs` gets 429 with
//    Retry-After for any request that carries an Authorization header until that window ends,
//    right token or not: a guesser must not learn which guess was right, and the tunnel's owner
//    behind the same address waits at most one window. Requests without credentials (create,
//    the docs) are not refused by it.
// Failures and refusals are logged at most once per source per minute (with a suppressed count).
// Thread-safe: handlers run on the worker pool.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "common/metrics.h"
#include "common/source_failures.h"
#include "controld/api/api_types.h"

namespace ot::controld {

// The guard's counts per source and its metrics. One state may guard several handlers (the API's
// routes and the streamed admin routes), so their failures count together.
struct SourceGuardState;

// opentunnel_auth_failures_total{kind="api"}, opentunnel_requests_limited_total{limit=
// "auth_failures"} and opentunnel_api_client_address_invalid_total are registered in `metrics`.
// `now_ms` is a steady clock in milliseconds (injected for tests).
[[nodiscard]] std::shared_ptr<SourceGuardState> makeSourceGuardState(
    SourceFailureLimits limits, metrics::Metrics& metrics, std::function<uint64_t()> nowMs = {});

[[nodiscard]] ApiHandler withSourceGuard(ApiHandler inner, std::shared_ptr<SourceGuardState> state);

// A guard with a state of its own.
[[nodiscard]] ApiHandler withSourceGuard(ApiHandler inner, SourceFailureLimits limits,
                                         metrics::Metrics& metrics,
                                         std::function<uint64_t()> nowMs = {});

}  // namespace ot::controld
