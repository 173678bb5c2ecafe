// The load tool's reconnect waits (tests/load/load_retry.h) follow otunnel's schedule: a storm of
// busy answers never waits past 3 s, Retry-After is taken up to 2 s, the 21st busy answer in a
// row counts as broken, and an attached bridge's end waits 125-250 ms.
#include "tests/load/load_retry.h"

#include <doctest/doctest.h>

#include <algorithm>

namespace {

using ot::client::Backoff;
using ot::client::RetryHint;
using ot::client::RetryKind;
using ot::load::scheduleWait;
using ot::load::WaitKind;

// Always the top of the range, so every bound is reached.
uint64_t top(uint64_t n) {
  return n;
}

}  // namespace

TEST_CASE("load retry: busy answers wait 0.25-3 s, twenty in a row, then count as broken") {
  Backoff backoff(top);
  const RetryHint busy{RetryKind::kBusy, 0};
  uint64_t longest = 0;
  for (uint32_t i = 0; i < Backoff::kBusyLimit; ++i) {
    const auto wait = scheduleWait(backoff, busy, false);
    CHECK(wait.kind == WaitKind::kBusy);
    longest = std::max(longest, wait.delayMs);
  }
  CHECK(longest == Backoff::kBusyCapMs);
  const auto past = scheduleWait(backoff, busy, false);
  CHECK(past.kind == WaitKind::kBroken);
  CHECK(past.delayMs == 250);  // the first broken wait: nothing broken came before
}

TEST_CASE("load retry: Retry-After is honoured up to 2 s, broken attempts double") {
  Backoff backoff(top);
  CHECK(scheduleWait(backoff, {RetryKind::kBusy, 1000}, false).delayMs == 1500);
  CHECK(scheduleWait(backoff, {RetryKind::kBusy, 9000}, false).delayMs == 3000);
  CHECK(scheduleWait(backoff, {}, false).delayMs == 250);
  const auto second = scheduleWait(backoff, {}, false);
  CHECK(second.kind == WaitKind::kBroken);
  CHECK(second.delayMs == 500);
}

TEST_CASE("load retry: an attached bridge's end waits 125-250 ms and is counted apart") {
  Backoff backoff(top);
  for (int i = 0; i < 6; ++i) (void)scheduleWait(backoff, {}, false);
  backoff.attached();
  const auto wait = scheduleWait(backoff, {RetryKind::kBusy, 0}, true);
  CHECK(wait.kind == WaitKind::kAfterAttached);
  CHECK(wait.delayMs == 250);

  ot::load::LoadCounters counters;
  ot::load::countWait(counters, wait);
  ot::load::countWait(counters, {2900, WaitKind::kBusy});
  ot::load::countWait(counters, {700, WaitKind::kBusy});
  const auto& busy = counters.waits[static_cast<size_t>(WaitKind::kBusy)];
  CHECK(busy.count == 2);
  CHECK(busy.longestMs == 2900);
  CHECK(counters.waits[static_cast<size_t>(WaitKind::kAfterAttached)].count == 1);
  CHECK(counters.waits[static_cast<size_t>(WaitKind::kBroken)].count == 0);
}
