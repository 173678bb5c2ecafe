// The cool-down's probe token (ca_probe_token.h): its text form, and taking and releasing it on
// real storage (SQLite and MariaDB) from two machines.
#include "controld/ca_probe_token.h"

#include <doctest/doctest.h>

#include "tests/controld/test_database.h"

namespace ot::controld {
namespace {

using testing::testDatabases;

constexpr int64_t kNow = 1'750'000'000'000;

TEST_CASE("ca probe token: text form round trips and rejects malformed values") {
  const CaProbeToken held{"machine-a", kNow};
  CHECK(encodeCaProbeToken(held) == "machine-a 1750000000000");
  CHECK(decodeCaProbeToken(encodeCaProbeToken(held)) == held);
  const CaProbeToken free{"", 5};
  CHECK(decodeCaProbeToken(encodeCaProbeToken(free)) == free);
  for (const char* bad : {"", "machine-a", "machine-a x", "machine-a -1", "machine-a 12x", "a b 12",
                          "machine-a 99999999999999999999"}) {
    CAPTURE(bad);
    CHECK_FALSE(decodeCaProbeToken(bad).has_value());
  }
}

TEST_CASE("ca probe token: one machine holds it until it releases it or it expires") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto a = db->openMigrated();
    auto b = db->open();
    CHECK(takeCaProbeToken(*a, "machine-a", kNow).value());
    CHECK_FALSE(takeCaProbeToken(*b, "machine-b", kNow + 1).value());
    CHECK(takeCaProbeToken(*a, "machine-a", kNow + 2).value());  // its own: taken again

    // Released: the other machine takes it at once, and a release by a non-holder does nothing.
    releaseCaProbeToken(*a, "machine-a", kNow + 3);
    CHECK(takeCaProbeToken(*b, "machine-b", kNow + 4).value());
    releaseCaProbeToken(*a, "machine-a", kNow + 5);
    CHECK_FALSE(takeCaProbeToken(*a, "machine-a", kNow + 6).value());

    // machine-b dies holding it: it is free once its expiry passed.
    CHECK_FALSE(takeCaProbeToken(*a, "machine-a", kNow + 4 + kCaProbeTokenMs - 1).value());
    CHECK(takeCaProbeToken(*a, "machine-a", kNow + 4 + kCaProbeTokenMs).value());

    // An unreadable value is overwritten rather than blocking the probe forever.
    REQUIRE(a->compareAndSetMeta(kCaProbeMetaKey, *a->getMeta(kCaProbeMetaKey).value(), "junk")
                .value());
    CHECK(takeCaProbeToken(*b, "machine-b", kNow).value());
    CHECK(takeCaProbeToken(*b, "", kNow).error().kind == ErrorKind::kInvalid);
  }
}

}  // namespace
}  // namespace ot::controld
