// The load tool's tally of its reconnect waits (tests/load/load_retry.h): the waits are otunnel's
// (client::Backoff::nextWait, tested in tests/client/backoff_test.cc); an attached bridge's end
// waits 125-250 ms and each kind is counted apart, with its longest.
#include "tests/load/load_retry.h"

#include <doctest/doctest.h>

namespace {

using ot::client::Backoff;
using ot::client::RetryKind;
using ot::load::WaitKind;

// Always the top of the range, so every bound is reached.
uint64_t top(uint64_t n) {
  return n;
}

}  // namespace

TEST_CASE("load retry: an attached bridge's end waits 125-250 ms and is counted apart") {
  Backoff backoff(top);
  for (int i = 0; i < 6; ++i) (void)backoff.nextWait({}, false);
  backoff.attached();
  const auto wait = backoff.nextWait({RetryKind::kBusy, 0}, true);
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
