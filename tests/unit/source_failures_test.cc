// SourceFailures (common/source_failures.h): refusing a source past its failures in a window,
// the per-source log rate, and the bounded table. The clock is the test's.
#include "common/source_failures.h"

#include <doctest/doctest.h>

#include <string>

namespace ot {

namespace {
SourceFailureLimits limits(uint32_t maxFailures, uint64_t windowMs, size_t maxSources = 100,
                           uint64_t logEveryMs = 10'000) {
  return SourceFailureLimits{maxFailures, windowMs, maxSources, logEveryMs};
}
}  // namespace

TEST_CASE("source_failures: a source is refused after its limit until its window ends") {
  SourceFailures table(limits(3, 60'000));
  uint64_t now = 1'000;
  CHECK_FALSE(table.refuse("192.0.2.1", now));
  CHECK(table.recordFailure("192.0.2.1", now).failuresInWindow == 1);
  CHECK_FALSE(table.refuse("192.0.2.1", now + 10));
  CHECK_FALSE(table.recordFailure("192.0.2.1", now + 20).nowRefused);
  const auto third = table.recordFailure("192.0.2.1", now + 30);
  CHECK(third.nowRefused);
  CHECK(third.failuresInWindow == 3);
  auto refused = table.refuse("192.0.2.1", now + 40);
  REQUIRE(refused);
  CHECK(refused->retryAfterMs == 60'000 - 40);
  refused = table.refuse("192.0.2.1", now + 59'999);
  REQUIRE(refused);
  CHECK(refused->retryAfterMs == 1);
  // The window (from the first failure) is over: allowed again, and the count starts afresh.
  CHECK_FALSE(table.refuse("192.0.2.1", now + 60'000));
  CHECK(table.recordFailure("192.0.2.1", now + 60'001).failuresInWindow == 1);
  CHECK_FALSE(table.refuse("192.0.2.1", now + 60'002));
}

TEST_CASE("source_failures: other sources are not affected") {
  SourceFailures table(limits(2, 60'000));
  table.recordFailure("192.0.2.1", 0);
  table.recordFailure("192.0.2.1", 1);
  CHECK(table.refuse("192.0.2.1", 2));
  CHECK_FALSE(table.refuse("192.0.2.2", 2));
  CHECK_FALSE(table.refuse("2001:db8::/64", 2));
}

TEST_CASE("source_failures: maxFailures 0 counts but never refuses") {
  SourceFailures table(limits(0, 60'000));
  for (uint64_t i = 0; i < 100; ++i) CHECK_FALSE(table.recordFailure("192.0.2.1", i).nowRefused);
  CHECK_FALSE(table.refuse("192.0.2.1", 100));
}

TEST_CASE("source_failures: one log line per source per interval, with what was suppressed") {
  SourceFailures table(limits(1000, 600'000, 100, 10'000));
  auto first = table.recordFailure("192.0.2.1", 0);
  REQUIRE(first.logWithSuppressed);
  CHECK(*first.logWithSuppressed == 0);
  for (uint64_t i = 1; i <= 5; ++i)
    CHECK_FALSE(table.recordFailure("192.0.2.1", i).logWithSuppressed);
  // Another source gets its own line at once.
  CHECK(table.recordFailure("192.0.2.2", 6).logWithSuppressed);
  const auto later = table.recordFailure("192.0.2.1", 10'000);
  REQUIRE(later.logWithSuppressed);
  CHECK(*later.logWithSuppressed == 5);
}

TEST_CASE("source_failures: the failure that starts refusing is logged; refusals share the rate") {
  SourceFailures table(limits(3, 60'000, 100, 10'000));
  CHECK(table.recordFailure("192.0.2.1", 0).logWithSuppressed);
  CHECK_FALSE(table.recordFailure("192.0.2.1", 1).logWithSuppressed);
  const auto limit = table.recordFailure("192.0.2.1", 2);
  REQUIRE(limit.logWithSuppressed);
  CHECK(*limit.logWithSuppressed == 1);
  int logged = 0;
  for (uint64_t t = 3; t < 10'002; ++t) {
    auto refused = table.refuse("192.0.2.1", t);
    REQUIRE(refused);
    if (refused->logWithSuppressed) ++logged;
  }
  CHECK(logged == 0);
  auto refused = table.refuse("192.0.2.1", 10'002);
  REQUIRE(refused);
  REQUIRE(refused->logWithSuppressed);
  CHECK(*refused->logWithSuppressed == 9'999);
}

TEST_CASE("source_failures: the table holds at most maxSources, evicting the oldest") {
  SourceFailures table(limits(2, 60'000, 3));
  table.recordFailure("a", 0);
  table.recordFailure("a", 1);  // "a" is refused
  table.recordFailure("b", 2);
  table.recordFailure("c", 3);
  CHECK(table.size() == 3);
  table.recordFailure("b", 4);  // "b" touched: "a" is now the oldest
  table.recordFailure("d", 5);
  CHECK(table.size() == 3);
  CHECK(table.evictions() == 1);
  CHECK_FALSE(table.refuse("a", 6));  // forgotten
  CHECK(table.refuse("b", 6));        // b has 2 failures
  for (uint64_t i = 0; i < 10'000; ++i) table.recordFailure("s" + std::to_string(i), 10 + i);
  CHECK(table.size() == 3);
}

TEST_CASE("source_failures: entries whose window and log interval ended are dropped") {
  SourceFailures table(limits(5, 1'000, 100, 1'000));
  for (uint64_t i = 0; i < 50; ++i) table.recordFailure("s" + std::to_string(i), i);
  CHECK(table.size() == 50);
  // Each later failure drops a few expired entries.
  for (uint64_t i = 0; i < 20; ++i) table.recordFailure("late", 5'000 + i);
  CHECK(table.size() == 1);
  CHECK(table.evictions() == 0);
}

}  // namespace ot
