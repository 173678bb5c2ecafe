// Leases in meta (meta_lease.h): the text form, and taking, renewing and releasing one on real
// storage (SQLite and MariaDB) from two machines.
#include "controld/store/meta_lease.h"

#include <doctest/doctest.h>

#include <string>
#include <thread>

#include "tests/controld/test_database.h"

namespace ot::controld {
namespace {

using testing::testDatabases;

constexpr int64_t kNow = 1'750'000'000'000;
constexpr int64_t kTerm = 10'000;
const std::string kKey = "some_lease";

TEST_CASE("meta lease: text form round trips and rejects malformed values") {
  const MetaLease held{"machine-a", kNow};
  CHECK(encodeMetaLease(held) == "machine-a@1750000000000");
  CHECK(decodeMetaLease(encodeMetaLease(held)) == held);
  const MetaLease released{"", 5};
  CHECK(decodeMetaLease(encodeMetaLease(released)) == released);
  const MetaLease oddOwner{"ops@host", 7};  // the last '@' separates
  CHECK(decodeMetaLease(encodeMetaLease(oddOwner)) == oddOwner);
  for (const char* bad : {"", "machine-a", "machine-a@x", "machine-a@-1", "machine-a@12x",
                          "machine-a@", "machine-a@99999999999999999999"}) {
    CAPTURE(bad);
    CHECK_FALSE(decodeMetaLease(bad).has_value());
  }
}

TEST_CASE("meta lease: one machine holds it until it releases it or it expires") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto a = db->openMigrated();
    auto b = db->open();
    CHECK(takeMetaLease(*a, kKey, "machine-a", kNow, kNow + kTerm).value());
    CHECK_FALSE(takeMetaLease(*b, kKey, "machine-b", kNow + 1, kNow + 1 + kTerm).value());
    // Its own: renewed, with the new end.
    CHECK(takeMetaLease(*a, kKey, "machine-a", kNow + 2, kNow + 2 + kTerm).value());
    CHECK(*a->getMeta(kKey).value() == encodeMetaLease({"machine-a", kNow + 2 + kTerm}));

    // Released: the other machine takes it at once, and a release by a non-holder does nothing.
    releaseMetaLease(*a, kKey, "machine-a", kNow + 3);
    CHECK(takeMetaLease(*b, kKey, "machine-b", kNow + 4, kNow + 4 + kTerm).value());
    releaseMetaLease(*a, kKey, "machine-a", kNow + 5);
    CHECK_FALSE(takeMetaLease(*a, kKey, "machine-a", kNow + 6, kNow + 6 + kTerm).value());

    // machine-b dies holding it: it is free once its expiry passed.
    CHECK_FALSE(
        takeMetaLease(*a, kKey, "machine-a", kNow + 4 + kTerm - 1, kNow + 3 * kTerm).value());
    CHECK(takeMetaLease(*a, kKey, "machine-a", kNow + 4 + kTerm, kNow + 3 * kTerm).value());

    // An unreadable value is overwritten rather than blocking the work forever.
    REQUIRE(a->compareAndSetMeta(kKey, *a->getMeta(kKey).value(), "junk").value());
    CHECK(takeMetaLease(*b, kKey, "machine-b", kNow, kNow + kTerm).value());
    CHECK(takeMetaLease(*b, kKey, "", kNow, kNow + kTerm).error().kind == ErrorKind::kInvalid);
  }
}

TEST_CASE("meta lease: of two machines taking it at once, exactly one wins") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto a = db->openMigrated();
    auto b = db->open();
    for (int round = 0; round < 20; ++round) {
      CAPTURE(round);
      const std::string key = kKey + std::to_string(round);
      // Round 0..9: the row is absent (insert race); 10..19: an expired lease (compare-and-set).
      if (round >= 10) REQUIRE(a->insertMetaIfAbsent(key, encodeMetaLease({"gone", 1})).value());
      Result<bool> tookA = false;
      Result<bool> tookB = false;
      std::thread other([&] { tookB = takeMetaLease(*b, key, "machine-b", kNow, kNow + kTerm); });
      tookA = takeMetaLease(*a, key, "machine-a", kNow, kNow + kTerm);
      other.join();
      REQUIRE(tookA.ok());
      REQUIRE(tookB.ok());
      CHECK(*tookA != *tookB);
      const auto holder = decodeMetaLease(*a->getMeta(key).value());
      REQUIRE(holder.has_value());
      CHECK(holder->owner == (*tookA ? "machine-a" : "machine-b"));
    }
  }
}

}  // namespace
}  // namespace ot::controld
