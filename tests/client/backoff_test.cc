#include "client/backoff.h"

#include <doctest/doctest.h>

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
