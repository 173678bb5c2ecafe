// The load tool's report arithmetic (tests/load/load_report.h): the idle projection on the line
// through two measured points.
#include "tests/load/load_report.h"

#include <doctest/doctest.h>

using ot::load::idleByTwoPoints;

TEST_CASE("load report: idle CPU projected on the slope through two measured points") {
  // 1.0 % at 10,000 and 1.8 % at 20,000: 0.08 % per 1,000 bridges, 0.2 % fixed.
  CHECK(idleByTwoPoints(10'000, 1.0, 20'000, 1.8, 50'000) == doctest::Approx(4.2));
  CHECK(idleByTwoPoints(10'000, 1.0, 20'000, 1.8, 20'000) == doctest::Approx(1.8));
  CHECK(idleByTwoPoints(10'000, 1.0, 20'000, 1.8, 0) == doctest::Approx(0.2));
  // Through zero when there is no fixed part: the same as scaling the high point.
  CHECK(idleByTwoPoints(9'500, 1.0, 19'000, 2.0, 50'000) ==
        doctest::Approx(2.0 * 50'000 / 19'000.0));
  // A cost per bridge that grows with the bridges (cache misses) projects above the scaled one.
  CHECK(idleByTwoPoints(10'000, 0.8, 20'000, 1.8, 50'000) > 1.8 * 2.5);
  // No second point to take a slope from: the high point.
  CHECK(idleByTwoPoints(20'000, 1.0, 20'000, 1.8, 50'000) == doctest::Approx(1.8));
}
