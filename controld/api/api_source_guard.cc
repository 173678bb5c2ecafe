#include "controld/api/api_source_guard.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "common/ip_address.h"
#include "common/log.h"

namespace ot::controld {

namespace {

const log::Logger kApiSourceGuardLog("controld.api");
constexpr uint64_t kInvalidAddressLogEveryMs = 60'000;

uint64_t steadyNowMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

struct SourceGuardState {
  SourceGuardState(SourceFailureLimits limits, metrics::Metrics& metrics,
                   std::function<uint64_t()> now)
      : failures(limits),
        nowMs(now ? std::move(now) : std::function<uint64_t()>(steadyNowMs)),
        authFailures(metrics.counter("opentunnel_auth_failures_total",
                                     "Failed authentications: wrong or missing credentials.",
                                     {{"kind", "api"}})),
        refused(metrics.counter("opentunnel_requests_limited_total",
                                "API requests refused by a limit.", {{"limit", "auth_failures"}})),
        invalidAddresses(metrics.counter("opentunnel_api_client_address_invalid_total",
                                         "Requests whose client address was not an IP address "
                                         "(relayd must send an address, not an endpoint).")) {}

  std::mutex mutex;
  SourceFailures failures;
  std::function<uint64_t()> nowMs;
  prometheus::Counter& authFailures;
  prometheus::Counter& refused;
  prometheus::Counter& invalidAddresses;
  bool invalidLogged = false;
  uint64_t invalidLastLogMs = 0;
  uint64_t invalidUnlogged = 0;

  void invalidAddress(const std::string& address) {
    invalidAddresses.Increment();
    const uint64_t now = nowMs();
    uint64_t suppressed = 0;
    {
      const std::lock_guard lock(mutex);
      if (invalidLogged && now - invalidLastLogMs < kInvalidAddressLogEveryMs) {
        ++invalidUnlogged;
        return;
      }
      suppressed = invalidUnlogged;
      invalidLogged = true;
      invalidLastLogMs = now;
      invalidUnlogged = 0;
    }
    kApiSourceGuardLog.warn(
        "client address is not an IP address; ignored",
        {{"client_address", address.substr(0, 64)}, {"suppressed", suppressed}});
  }
};

namespace {

std::string seconds(uint64_t ms) {
  return std::to_string(std::max<uint64_t>(1, (ms + 999) / 1000));
}

}  // namespace

std::shared_ptr<SourceGuardState> makeSourceGuardState(SourceFailureLimits limits,
                                                       metrics::Metrics& metrics,
                                                       std::function<uint64_t()> nowMs) {
  return std::make_shared<SourceGuardState>(limits, metrics, std::move(nowMs));
}

ApiHandler withSourceGuard(ApiHandler inner, SourceFailureLimits limits, metrics::Metrics& metrics,
                           std::function<uint64_t()> nowMs) {
  return withSourceGuard(std::move(inner), makeSourceGuardState(limits, metrics, std::move(nowMs)));
}

ApiHandler withSourceGuard(ApiHandler inner, std::shared_ptr<SourceGuardState> state) {
  return [inner = std::move(inner),
          state = std::move(state)](const ApiRequest& request) -> ApiResponse {
    const ApiRequest* effective = &request;
    ApiRequest copy;
    std::optional<std::string> source = sourceKey(request.clientAddress);
    if (!source && !request.clientAddress.empty()) {
      state->invalidAddress(request.clientAddress);
      copy = request;
      copy.clientAddress.clear();
      effective = &copy;
    }
    // Without an address (a local tool on the unix socket) there is no source to count.
    if (source && effective->header("Authorization")) {
      std::optional<SourceFailures::Refusal> refusal;
      {
        const std::lock_guard lock(state->mutex);
        refusal = state->failures.refuse(*source, state->nowMs());
      }
      if (refusal) {
        state->refused.Increment();
        if (refusal->logWithSuppressed) {
          kApiSourceGuardLog.warn("refusing credentials from a source that failed too often",
                                  {{"source", *source},
                                   {"retry_after_ms", refusal->retryAfterMs},
                                   {"suppressed", *refusal->logWithSuppressed}});
        }
        const std::string wait = seconds(refusal->retryAfterMs);
        ApiResponse response = ApiResponse::error(
            429, "RateLimitedError",
            "Too many failed authentications from this address; try again in " + wait + " seconds");
        response.headers.emplace_back("Retry-After", wait);
        return response;
      }
    }
    ApiResponse response = inner(*effective);
    if (response.status == 401) state->authFailures.Increment();
    if (response.status == 401 && source) {
      SourceFailures::Recorded recorded;
      {
        const std::lock_guard lock(state->mutex);
        recorded = state->failures.recordFailure(*source, state->nowMs());
      }
      if (recorded.logWithSuppressed) {
        kApiSourceGuardLog.warn(
            recorded.nowRefused
                ? "authentication failures: source refused for the rest of its window"
                : "authentication failed",
            {{"source", *source},
             {"path", effective->path},
             {"failures_in_window", recorded.failuresInWindow},
             {"suppressed", *recorded.logWithSuppressed}});
      }
    }
    return response;
  };
}

}  // namespace ot::controld
