// The CA cool-down's rules (ca_cooldown.h) on a manual clock: which failures count, when a
// cool-down starts, how long each lasts, what ends it, and the meta encoding.
#include "controld/issuance/ca_cooldown.h"

#include <doctest/doctest.h>

#include <cstdint>

namespace ot::controld {
namespace {

constexpr int64_t kT0 = 1'750'000'000'000;
constexpr int64_t kCooldownMinute = 60'000;
constexpr int64_t kCooldownHour = 60 * kCooldownMinute;

FailureDetail cooldownCaFailure() {
  FailureDetail detail;
  detail.failure = FailureClass::kTransient;
  detail.reason = "http_5xx";
  detail.pointsAtCa = true;
  detail.httpStatus = 503;
  return detail;
}

FailureDetail rateLimit(int64_t retryAfterMs) {
  FailureDetail detail;
  detail.failure = FailureClass::kTransient;
  detail.reason = "http_429";
  detail.rateLimited = true;
  detail.retryAfterMs = retryAfterMs;
  detail.httpStatus = 429;
  return detail;
}

FailureDetail dnsFailure() {
  FailureDetail detail;
  detail.reason = "dns";
  return detail;
}

// Applies `count` CA failures at `now`; answers how many of them started a cool-down.
int failTimes(CaCooldownState& state, int count, int64_t now) {
  int started = 0;
  for (int i = 0; i < count; ++i) {
    const CaCooldownStep step = caCooldownAfterFailure(state, cooldownCaFailure(), now);
    started += step.started ? 1 : 0;
    state = step.next;
  }
  return started;
}

TEST_CASE("ca cooldown: durations double from a minute up to an hour") {
  CHECK(caCooldownDurationMs(0) == kCooldownMinute);
  CHECK(caCooldownDurationMs(1) == kCooldownMinute);
  CHECK(caCooldownDurationMs(2) == 2 * kCooldownMinute);
  CHECK(caCooldownDurationMs(3) == 4 * kCooldownMinute);
  CHECK(caCooldownDurationMs(6) == 32 * kCooldownMinute);
  CHECK(caCooldownDurationMs(7) == kCooldownHour);
  CHECK(caCooldownDurationMs(1000) == kCooldownHour);
}

TEST_CASE("ca cooldown: five CA failures in a row start one; four do not") {
  int64_t now = kT0;
  CaCooldownState state;
  CHECK(failTimes(state, 4, now) == 0);
  CHECK(state.consecutiveFailures == 4);
  CHECK_FALSE(state.activeAt(now));

  now += 1000;
  const CaCooldownStep fifth = caCooldownAfterFailure(state, cooldownCaFailure(), now);
  CHECK(fifth.started);
  CHECK_FALSE(fifth.ended);
  CHECK(fifth.next.level == 1);
  CHECK(fifth.next.untilMs == now + kCooldownMinute);
  CHECK(fifth.next.consecutiveFailures == 0);
  CHECK(fifth.next.activeAt(now + kCooldownMinute - 1));
  CHECK_FALSE(fifth.next.activeAt(now + kCooldownMinute));
}

TEST_CASE("ca cooldown: failures that do not point at the CA neither count nor break the run") {
  CaCooldownState state;
  CHECK(failTimes(state, 3, kT0) == 0);
  const CaCooldownStep dns = caCooldownAfterFailure(state, dnsFailure(), kT0);
  CHECK_FALSE(dns.started);
  CHECK(dns.next == state);
  state = dns.next;
  CHECK(failTimes(state, 2, kT0) == 1);
  CHECK(state.level == 1);
}

TEST_CASE("ca cooldown: a success forgets the run, the level and any cool-down") {
  CaCooldownState state;
  CHECK(failTimes(state, 4, kT0) == 0);
  CaCooldownStep step = caCooldownAfterSuccess(state, kT0);
  CHECK_FALSE(step.ended);
  CHECK(step.next == CaCooldownState{});

  state = {};
  CHECK(failTimes(state, 5, kT0) == 1);
  step = caCooldownAfterSuccess(state, kT0 + 10'000);
  CHECK(step.ended);
  CHECK(step.next == CaCooldownState{});
  // After a success the next cool-down is a minute again.
  state = step.next;
  CHECK(failTimes(state, 5, kT0 + 20'000) == 1);
  CHECK(state.level == 1);
  CHECK(state.untilMs == kT0 + 20'000 + kCooldownMinute);
}

TEST_CASE("ca cooldown: each cool-down before a success lasts twice as long, at most an hour") {
  int64_t now = kT0;
  CaCooldownState state;
  const int64_t expected[] = {1, 2, 4, 8, 16, 32, 60, 60};
  for (const int64_t minutes : expected) {
    CAPTURE(minutes);
    REQUIRE(failTimes(state, 5, now) == 1);
    CHECK(state.untilMs == now + minutes * kCooldownMinute);
    now = state.untilMs;  // the CA still fails once it is over
  }
  CHECK(state.level == 8);
}

TEST_CASE("ca cooldown: failures while one lasts count but do not extend it") {
  CaCooldownState state;
  REQUIRE(failTimes(state, 5, kT0) == 1);
  const int64_t until = state.untilMs;
  // Attempts already running, and the probing renewal, fail during the cool-down.
  CHECK(failTimes(state, 7, kT0 + 1000) == 0);
  CHECK(state.untilMs == until);
  CHECK(state.level == 1);
  CHECK(state.consecutiveFailures == 7);
  // Once it is over, the next CA failure starts the second one (the run is long enough).
  const CaCooldownStep next = caCooldownAfterFailure(state, cooldownCaFailure(), until);
  CHECK(next.started);
  CHECK(next.next.level == 2);
  CHECK(next.next.untilMs == until + 2 * kCooldownMinute);
}

TEST_CASE("ca cooldown: one rate limit starts one, at least as long as its Retry-After") {
  SUBCASE("a short Retry-After: the minute") {
    const CaCooldownStep step = caCooldownAfterFailure({}, rateLimit(5'000), kT0);
    CHECK(step.started);
    CHECK(step.next.level == 1);
    CHECK(step.next.untilMs == kT0 + kCooldownMinute);
  }
  SUBCASE("none at all: the minute") {
    const CaCooldownStep step = caCooldownAfterFailure({}, rateLimit(0), kT0);
    CHECK(step.started);
    CHECK(step.next.untilMs == kT0 + kCooldownMinute);
  }
  SUBCASE("a long Retry-After wins, even past the hour") {
    const CaCooldownStep step = caCooldownAfterFailure({}, rateLimit(3 * kCooldownHour), kT0);
    CHECK(step.started);
    CHECK(step.next.untilMs == kT0 + 3 * kCooldownHour);
  }
  SUBCASE("during a cool-down it only pushes the end out") {
    CaCooldownState state;
    REQUIRE(failTimes(state, 5, kT0) == 1);
    CaCooldownStep step =
        caCooldownAfterFailure(state, rateLimit(10 * kCooldownMinute), kT0 + 1000);
    CHECK_FALSE(step.started);
    CHECK(step.next.level == 1);
    CHECK(step.next.untilMs == kT0 + 1000 + 10 * kCooldownMinute);
    step = caCooldownAfterFailure(step.next, rateLimit(1000), kT0 + 2000);
    CHECK(step.next.untilMs == kT0 + 1000 + 10 * kCooldownMinute);
  }
}

TEST_CASE("ca cooldown: the meta encoding round-trips and refuses what is not one") {
  const CaCooldownState state{kT0 + kCooldownMinute, 3, 2};
  const std::string text = encodeCaCooldown(state);
  CHECK(text == R"({"until_ms":1750000060000,"level":3,"consecutive_failures":2})");
  CHECK(decodeCaCooldown(text) == state);
  CHECK(decodeCaCooldown(encodeCaCooldown({})) == CaCooldownState{});
  CHECK_FALSE(decodeCaCooldown("").has_value());
  CHECK_FALSE(decodeCaCooldown("junk").has_value());
  CHECK_FALSE(decodeCaCooldown("[]").has_value());
  CHECK_FALSE(decodeCaCooldown(R"({"until_ms":1,"level":1})").has_value());
  CHECK_FALSE(
      decodeCaCooldown(R"({"until_ms":"1","level":1,"consecutive_failures":0})").has_value());
  CHECK_FALSE(
      decodeCaCooldown(R"({"until_ms":1,"level":-1,"consecutive_failures":0})").has_value());
  CHECK_FALSE(
      decodeCaCooldown(R"({"until_ms":1.5,"level":1,"consecutive_failures":0})").has_value());
}

}  // namespace
}  // namespace ot::controld
