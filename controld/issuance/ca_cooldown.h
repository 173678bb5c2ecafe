// The CA cool-down's rules, apart from storage and threads (ca_cooldown_gate.h shares the state
// between machines through meta). When the CA keeps failing, or says we are over its rate limit,
// new issuance pauses everywhere for a while instead of hammering it:
//  - kCaFailuresBeforeCooldown failed attempts in a row that point at the CA
//    (FailureDetail::points_at_ca), or a single rate limit (rate_limited), start a cool-down;
//  - the first lasts a minute, each further one before an attempt succeeds twice as long as the
//    one before, at most an hour; a rate limit's Retry-After makes it at least that long;
//  - any successful attempt ends a cool-down and forgets the count and the level;
//  - failures that do not point at the CA (DNS, a rejected name...) neither count nor break the
//    run: they say nothing about the CA;
//  - while one lasts, further failures (attempts already running, the probing renewal) count
//    towards the next one but do not start it; a rate limit may only push its end further out.
// Pure: no I/O, no clocks (times come in), no shared state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "controld/issuance/issuer.h"

namespace ot::controld {

inline constexpr const char* kCaCooldownMetaKey = "ca_cooldown";
inline constexpr int kCaFailuresBeforeCooldown = 5;
inline constexpr int64_t kCaCooldownFirstMs = 60'000;
inline constexpr int64_t kCaCooldownMaxMs = 3'600'000;

// The shared state, stored in meta as JSON:
// {"until_ms":<unix ms>,"level":<cool-downs since the last success>,"consecutive_failures":<n>}.
struct CaCooldownState {
  int64_t untilMs = 0;          // new issuance is paused while now < until_ms
  int level = 0;                // cool-downs started since the last successful attempt
  int consecutiveFailures = 0;  // CA-pointing failures since the last success or cool-down start

  [[nodiscard]] bool activeAt(int64_t nowMs) const { return nowMs < untilMs; }
  bool operator==(const CaCooldownState&) const = default;
};

[[nodiscard]] std::string encodeCaCooldown(const CaCooldownState& state);
// nullopt for text that is not such an object (a value with negative counts included).
[[nodiscard]] std::optional<CaCooldownState> decodeCaCooldown(std::string_view text);

// The length of cool-down number `level` (1 for the first): a minute * 2^(level-1), at most an
// hour. Levels below 1 count as 1.
[[nodiscard]] int64_t caCooldownDurationMs(int level);

struct CaCooldownStep {
  CaCooldownState next;
  bool started = false;  // this step began a cool-down (count it, log it)
  bool ended = false;    // this step ended one that was still running
};

// After an Issuer call that succeeded.
[[nodiscard]] CaCooldownStep caCooldownAfterSuccess(const CaCooldownState& state, int64_t nowMs);
// After an Issuer call that failed with `detail`.
[[nodiscard]] CaCooldownStep caCooldownAfterFailure(const CaCooldownState& state,
                                                    const FailureDetail& detail, int64_t nowMs);

}  // namespace ot::controld
