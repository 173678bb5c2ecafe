#include "client/backoff.h"

#include <doctest/doctest.h>
#include <uv.h>

#include <algorithm>
#include <vector>

TEST_CASE("client backoff: 125-250 ms first, doubling with equal jitter up to 30 s") {
  std::vector<uint64_t> spans;
  // Always the top of the range, so the bounds are exact.
  ot::client::Backoff top([&](uint64_t n) {
    spans.push_back(n);
    return n;
  });
  CHECK(top.nextDelayMs() == 250);
  CHECK(top.nextDelayMs() == 500);
  CHECK(top.nextDelayMs() == 1000);
  for (int i = 0; i < 10; ++i) (void)top.nextDelayMs();
  CHECK(top.nextDelayMs() == 30'000);
  CHECK(spans.front() == 125);  // the jitter covers the upper half of the base

  ot::client::Backoff bottom([](uint64_t) { return uint64_t{0}; });
  CHECK(bottom.nextDelayMs() == 125);
  CHECK(bottom.nextDelayMs() == 250);
  bottom.attached();
  CHECK(bottom.failuresInARow() == 0);
  CHECK(bottom.nextDelayMs() == 125);
}

TEST_CASE("client backoff: the real random source stays within the range") {
  ot::client::Backoff backoff(ot::client::uniformRandom);
  for (int i = 0; i < 200; ++i) {
    const uint64_t delay = backoff.nextDelayMs();
    CHECK(delay >= 125);
    CHECK(delay <= 30'000);
  }
}

namespace {

using ot::client::AttemptEnd;
using ot::client::RetryHint;
using ot::client::RetryKind;

AttemptEnd ended(AttemptEnd::Cause cause, int uvStatus = 0, int httpStatus = 0,
                 uint64_t retryAfterMs = 0, uint16_t closeCode = 0) {
  AttemptEnd end;
  end.cause = cause;
  end.uvStatus = uvStatus;
  end.httpStatus = httpStatus;
  end.retryAfterMs = retryAfterMs;
  end.closeCode = closeCode;
  return end;
}

RetryKind kindOf(const AttemptEnd& end) {
  return ot::client::classifyAttemptEnd(end).kind;
}

}  // namespace

TEST_CASE("client backoff: a restarting or shedding relay is busy, a broken one is not") {
  using Cause = AttemptEnd::Cause;
  // Busy: nothing listens between the old relayd and the new, a shed or a draining relay closes
  // before the handshake, 503 with Retry-After, drain or 1012 instead of attached.
  CHECK(kindOf(ended(Cause::kConnectFailed, UV_ECONNREFUSED)) == RetryKind::kBusy);
  CHECK(kindOf(ended(Cause::kClosedInHandshake, UV_EOF)) == RetryKind::kBusy);
  CHECK(kindOf(ended(Cause::kClosedInHandshake, UV_ECONNRESET)) == RetryKind::kBusy);
  CHECK(kindOf(ended(Cause::kClosedInHandshake, UV_EPIPE)) == RetryKind::kBusy);
  CHECK(ot::client::classifyAttemptEnd(ended(Cause::kUpgradeRefused, 0, 503, 1000)) ==
        RetryHint{RetryKind::kBusy, 1000});
  CHECK(kindOf(ended(Cause::kClosed, 0, 0, 0, 1012)) == RetryKind::kBusy);
  CHECK(kindOf(ended(Cause::kClosed, 0, 0, 0, 1013)) == RetryKind::kBusy);
  CHECK(kindOf(ended(Cause::kDrain)) == RetryKind::kBusy);
  // Broken: the rest keeps the doubling.
  CHECK(kindOf(ended(Cause::kConnectFailed, UV_EHOSTUNREACH)) == RetryKind::kBroken);
  CHECK(kindOf(ended(Cause::kConnectFailed, UV_ETIMEDOUT)) == RetryKind::kBroken);
  CHECK(kindOf(ended(Cause::kConnectFailed, UV_EAI_NONAME)) == RetryKind::kBroken);
  CHECK(kindOf(ended(Cause::kClosedInHandshake, UV_ETIMEDOUT)) == RetryKind::kBroken);
  CHECK(kindOf(ended(Cause::kTlsFailed)) == RetryKind::kBroken);
  CHECK(kindOf(ended(Cause::kUpgradeRefused, 0, 503)) == RetryKind::kBroken);  // no Retry-After
  CHECK(kindOf(ended(Cause::kUpgradeRefused, 0, 500, 1000)) == RetryKind::kBroken);
  CHECK(kindOf(ended(Cause::kClosed, 0, 0, 0, 1002)) == RetryKind::kBroken);
  CHECK(kindOf(ended(Cause::kClosed, 0, 0, 0, 1006)) == RetryKind::kBroken);
  CHECK(kindOf(ended(Cause::kAttachError)) == RetryKind::kBroken);
  CHECK(kindOf(ended(Cause::kOther)) == RetryKind::kBroken);
}

TEST_CASE("client backoff: busy retries soon in a spread that stops growing at 3 s") {
  const RetryHint busy{RetryKind::kBusy, 0};
  ot::client::Backoff top([](uint64_t n) { return n; });
  CHECK(top.nextDelayMs(busy) == 750);
  CHECK(top.nextDelayMs(busy) == 1500);
  CHECK(top.nextDelayMs(busy) == 3000);
  for (int i = 0; i < 10; ++i) CHECK(top.nextDelayMs(busy) == 3000);
  CHECK(top.failuresInARow() == 0);  // busy answers do not feed the doubling

  ot::client::Backoff bottom([](uint64_t) { return uint64_t{0}; });
  for (int i = 0; i < 5; ++i) CHECK(bottom.nextDelayMs(busy) == 250);

  // A broken answer in between doubles from where broken answers left off, and busy stays short.
  ot::client::Backoff mixed([](uint64_t n) { return n; });
  CHECK(mixed.nextDelayMs(RetryHint{}) == 250);
  CHECK(mixed.nextDelayMs(RetryHint{}) == 500);
  CHECK(mixed.nextDelayMs(busy) == 750);
  CHECK(mixed.nextDelayMs(RetryHint{}) == 1000);
  mixed.attached();
  CHECK(mixed.busyInARow() == 0);
  CHECK(mixed.nextDelayMs(busy) == 750);
}

TEST_CASE("client backoff: Retry-After is honoured up to 2 s, with up to half again of jitter") {
  ot::client::Backoff top([](uint64_t n) { return n; });
  CHECK(top.nextDelayMs(RetryHint{RetryKind::kBusy, 1000}) == 1500);
  CHECK(top.nextDelayMs(RetryHint{RetryKind::kBusy, 60'000}) == 3000);
  ot::client::Backoff bottom([](uint64_t) { return uint64_t{0}; });
  CHECK(bottom.nextDelayMs(RetryHint{RetryKind::kBusy, 1000}) == 1000);
}

TEST_CASE("client backoff: a relay busy for 20 attempts in a row is backed off like a broken one") {
  const RetryHint busy{RetryKind::kBusy, 0};
  ot::client::Backoff top([](uint64_t n) { return n; });
  for (uint32_t i = 0; i < ot::client::Backoff::kBusyLimit; ++i)
    CHECK(top.nextDelayMs(busy) <= 3000);
  CHECK(top.nextDelayMs(busy) == 250);  // the doubling's first step, then on up
  CHECK(top.nextDelayMs(busy) == 500);
  for (int i = 0; i < 10; ++i) (void)top.nextDelayMs(busy);
  CHECK(top.nextDelayMs(busy) == 30'000);
}

namespace {

using ot::client::Backoff;
using ot::client::WaitKind;

// Always the top of the range, so every bound is reached.
uint64_t topOfRange(uint64_t n) {
  return n;
}

}  // namespace

TEST_CASE(
    "client backoff: nextWait: busy answers wait 0.25-3 s, twenty in a row, then count as broken") {
  Backoff backoff(topOfRange);
  const RetryHint busy{RetryKind::kBusy, 0};
  uint64_t longest = 0;
  for (uint32_t i = 0; i < Backoff::kBusyLimit; ++i) {
    const auto wait = backoff.nextWait(busy, false);
    CHECK(wait.kind == WaitKind::kBusy);
    longest = std::max(longest, wait.delayMs);
  }
  CHECK(longest == Backoff::kBusyCapMs);
  const auto past = backoff.nextWait(busy, false);
  CHECK(past.kind == WaitKind::kBroken);
  CHECK(past.delayMs == 250);  // the first broken wait: nothing broken came before
}

TEST_CASE("client backoff: nextWait: Retry-After is honoured up to 2 s, broken attempts double") {
  Backoff backoff(topOfRange);
  CHECK(backoff.nextWait({RetryKind::kBusy, 1000}, false).delayMs == 1500);
  CHECK(backoff.nextWait({RetryKind::kBusy, 9000}, false).delayMs == 3000);
  CHECK(backoff.nextWait({}, false).delayMs == 250);
  const auto second = backoff.nextWait({}, false);
  CHECK(second.kind == WaitKind::kBroken);
  CHECK(second.delayMs == 500);
}

TEST_CASE("client backoff: a reset close (4000) redials within a few ms and counts no failure") {
  using Cause = AttemptEnd::Cause;
  CHECK(kindOf(ended(Cause::kClosed, 0, 0, 0, 4000)) == RetryKind::kReset);
  CHECK(kindOf(ended(Cause::kClosed, 0, 0, 0, 4001)) == RetryKind::kBroken);
  CHECK(kindOf(ended(Cause::kClosed, 0, 0, 0, 1000)) == RetryKind::kBroken);

  Backoff backoff(topOfRange);
  // Some broken attempts first: a reset neither waits them out nor adds to them.
  CHECK(backoff.nextWait({}, false).delayMs == 250);
  CHECK(backoff.nextWait({}, false).delayMs == 500);
  const RetryHint reset{RetryKind::kReset, 0};
  for (const bool attached : {true, false}) {
    const auto wait = backoff.nextWait(reset, attached);
    CHECK(wait.kind == WaitKind::kReset);
    CHECK(wait.delayMs == Backoff::kResetSpreadMs);  // the top of its spread
    CHECK(Backoff::kResetSpreadMs <= 50);
  }
  CHECK(backoff.failuresInARow() == 2);
  CHECK(backoff.busyInARow() == 0);
  // The spread is random: links of one pool do not all redial in the same millisecond.
  Backoff real(ot::client::uniformRandom);
  std::vector<uint64_t> delays;
  for (int i = 0; i < 24; ++i) delays.push_back(real.nextWait(reset, true).delayMs);
  CHECK(*std::max_element(delays.begin(), delays.end()) <= Backoff::kResetSpreadMs);
  std::sort(delays.begin(), delays.end());
  CHECK(std::unique(delays.begin(), delays.end()) - delays.begin() > 1);
}
