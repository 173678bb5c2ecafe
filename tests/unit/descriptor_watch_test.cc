// The descriptor warnings' decision (common/descriptor_watch.h): when use crosses 50 % and 80 % of
// the limit, and the repeat every ten minutes while it stays there.
#include "common/descriptor_watch.h"

#include <doctest/doctest.h>

namespace ot::metrics {
namespace {

constexpr int64_t kMinuteMs = 60'000;

TEST_CASE("descriptor warnings: crossing 50 % and 80 % warns once, then every ten minutes") {
  DescriptorWarnings warnings;
  CHECK(warnings.check(49, 100, 0) == 0);
  CHECK(warnings.check(50, 100, 1) == 50);
  CHECK(warnings.check(60, 100, 2) == 0);  // still above 50 %: said already
  CHECK(warnings.check(80, 100, 3) == 80);
  CHECK(warnings.check(95, 100, 4) == 0);
  CHECK(warnings.check(95, 100, 3 + 10 * kMinuteMs - 1) == 0);
  CHECK(warnings.check(95, 100, 3 + 10 * kMinuteMs) == 80);  // the repeat
  // Down to between the two: no line (the 80 % one was just written), and the repeat goes on.
  CHECK(warnings.check(70, 100, 3 + 11 * kMinuteMs) == 0);
  CHECK(warnings.check(70, 100, 3 + 20 * kMinuteMs) == 50);
  // Below 50 %, then above again: at once.
  CHECK(warnings.check(10, 100, 3 + 21 * kMinuteMs) == 0);
  CHECK(warnings.check(55, 100, 3 + 21 * kMinuteMs + 1) == 50);
  CHECK(warnings.check(85, 100, 3 + 21 * kMinuteMs + 2) == 80);
}

TEST_CASE("descriptor warnings: an unknown or zero limit never warns") {
  DescriptorWarnings warnings;
  CHECK(warnings.check(10, 0, 0) == 0);
  CHECK(warnings.check(0, 0, 0) == 0);
}

TEST_CASE("descriptor warnings: the process's own counts are read and its threads counted") {
  DescriptorWarnings warnings;
  const log::Logger logger("test.descriptors");
  // A test process is far below its limit: nothing to say.
  CHECK(checkDescriptors(warnings, logger, 1) == 0);
  CHECK(threadCount() >= 1);
}

}  // namespace
}  // namespace ot::metrics
