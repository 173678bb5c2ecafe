#include "relayd/drain_pace.h"

#include <doctest/doctest.h>

using ot::relayd::drainPerStep;
using ot::relayd::drainSteps;
using ot::relayd::kDrainStepMs;

TEST_CASE("relayd drain pace: 5,000 bridges a second, and every bridge told within 5 s") {
  CHECK(drainPerStep(0) == 50);  // 50 per 10 ms step = 5,000 a second
  CHECK(drainSteps(0) == 0);
  CHECK(drainSteps(50) == 0);                      // one batch, at once
  CHECK(drainSteps(5'000) * kDrainStepMs == 990);  // 5,000 a second: the last at ~1 s
  CHECK(drainSteps(25'000) * kDrainStepMs == 4'990);
  // More than 5 s' worth at 5,000 a second: faster, still all within 5 s.
  CHECK(drainPerStep(50'000) == 100);
  CHECK(drainSteps(50'000) * kDrainStepMs == 4'990);
  CHECK(drainPerStep(100'001) == 201);
  CHECK(drainSteps(100'001) * kDrainStepMs <= 5'000);
  for (size_t bridges : {1UL, 4'999UL, 25'001UL, 60'000UL, 123'457UL}) {
    CAPTURE(bridges);
    CHECK(drainSteps(bridges) * kDrainStepMs < 5'000);
    // Never faster than needed: below 25,000 the rate is 5,000 a second.
    if (bridges <= 25'000) CHECK(drainPerStep(bridges) == 50);
  }
}
