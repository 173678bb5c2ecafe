// The log throttle (common/log_throttle.h): one line per interval, counting what it held back.
#include "common/log_throttle.h"

#include <doctest/doctest.h>

TEST_CASE("log throttle: one line per interval, counting what it held back") {
  ot::LogThrottle throttle(10'000);
  uint64_t suppressed = 99;
  CHECK(throttle.quietSince(0));
  CHECK(throttle.allow(1'000, suppressed));
  CHECK(suppressed == 0);
  CHECK_FALSE(throttle.quietSince(1'001));
  CHECK_FALSE(throttle.allow(1'001, suppressed));
  CHECK_FALSE(throttle.allow(10'999, suppressed));
  CHECK(throttle.allow(11'000, suppressed));
  CHECK(suppressed == 2);
}

TEST_CASE("log throttle: a forced line reports what was held back and restarts the interval") {
  ot::LogThrottle throttle(10'000);
  uint64_t suppressed = 0;
  CHECK(throttle.allow(0, suppressed));
  CHECK_FALSE(throttle.allow(5'000, suppressed));
  CHECK(throttle.force(6'000) == 1);
  CHECK_FALSE(throttle.allow(15'999, suppressed));
  CHECK(throttle.allow(16'000, suppressed));
  CHECK(suppressed == 1);
}
