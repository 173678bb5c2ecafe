// relayd's status store (docs/pools-status.md): reports kept per tunnel and origin, merged with
// the bridges attached here into the TunnelStatusReply; detach removes a report; memory bounded.
#include "relayd/status_store.h"

#include <doctest/doctest.h>

using ot::bridge::ProfileReport;
using ot::bridge::StatusReport;
using ot::relayd::kMaxStatusEntries;
using ot::relayd::StatusBridge;
using ot::relayd::StatusStore;

namespace {

StatusReport report(uint32_t up, uint64_t nextTry, std::string error) {
  StatusReport r;
  r.profiles.push_back({"main", 0, 2, up, 0, ""});
  r.profiles.push_back({"backup", 1, 2, 0, nextTry, std::move(error)});
  return r;
}

}  // namespace

TEST_CASE("status store: bridges and reports per origin and profile") {
  StatusStore store;
  const std::vector<StatusBridge> bridges = {
      {"a", "main", 0, 3}, {"a", "main", 0, 1}, {"b", "main", 0, 0}, {"", "", 0, 2}};
  REQUIRE(store.record("t1", "a", 11, report(2, 5000, "connection refused"), 1000));
  const auto reply = store.reply("t1", bridges, 1800);
  CHECK(reply.tunnel_id() == "t1");
  REQUIRE(reply.origins_size() == 3);
  CHECK(reply.origins(0).name().empty());  // unnamed bridges sort first
  CHECK_FALSE(reply.origins(0).reported());
  CHECK(reply.origins(0).profiles(0).links() == 1);
  CHECK(reply.origins(0).profiles(0).open_streams() == 2);

  const auto& a = reply.origins(1);
  CHECK(a.name() == "a");
  CHECK(a.reported());
  CHECK(a.report_age_ms() == 800);
  REQUIRE(a.profiles_size() == 2);
  CHECK(a.profiles(0).name() == "main");
  CHECK(a.profiles(0).links() == 2);
  CHECK(a.profiles(0).open_streams() == 4);
  CHECK(a.profiles(0).links_wanted() == 2);
  CHECK(a.profiles(0).links_up() == 2);
  // The unreachable profile has no bridge here: it comes from the report, its wait aged.
  CHECK(a.profiles(1).name() == "backup");
  CHECK(a.profiles(1).index() == 1);
  CHECK(a.profiles(1).links() == 0);
  CHECK(a.profiles(1).next_try_ms() == 4200);
  CHECK(a.profiles(1).last_error() == "connection refused");

  CHECK(reply.origins(2).name() == "b");
  CHECK_FALSE(reply.origins(2).reported());
  CHECK(reply.origins(2).profiles(0).links_wanted() == 0);

  // Another tunnel sees nothing of it.
  CHECK(store.reply("t2", {}, 1800).origins_size() == 0);
}

TEST_CASE("status store: the newest report wins; the wait never goes below 0") {
  StatusStore store;
  REQUIRE(store.record("t", "a", 1, report(0, 1000, "old"), 0));
  REQUIRE(store.record("t", "a", 2, report(2, 300, "new"), 100));
  const auto reply = store.reply("t", {{"a", "main", 0, 0}}, 5000);
  REQUIRE(reply.origins_size() == 1);
  CHECK(reply.origins(0).profiles(0).links_up() == 2);
  CHECK(reply.origins(0).profiles(1).last_error() == "new");
  CHECK(reply.origins(0).profiles(1).next_try_ms() == 0);
  CHECK(store.size() == 1);
}

TEST_CASE("status store: a report goes with the last bridge that sent one") {
  StatusStore store;
  REQUIRE(store.record("t", "a", 1, report(2, 0, ""), 0));
  REQUIRE(store.record("t", "a", 2, report(2, 0, ""), 0));
  store.forget("t", "a", 1);
  CHECK(store.size() == 1);
  store.forget("t", "b", 2);  // another origin: nothing of a's
  CHECK(store.size() == 1);
  store.forget("t", "a", 2);
  CHECK(store.size() == 0);
  CHECK_FALSE(store.reply("t", {{"a", "main", 0, 0}}, 0).origins(0).reported());
}

TEST_CASE("status store: bounded") {
  StatusStore store;
  for (size_t i = 0; i < kMaxStatusEntries; ++i)
    REQUIRE(store.record("t" + std::to_string(i), "a", i, report(1, 0, ""), 0));
  CHECK_FALSE(store.record("other", "a", 1, report(1, 0, ""), 0));
  CHECK(store.dropped() == 1);
  // A known entry is still refreshed.
  CHECK(store.record("t0", "a", 0, report(2, 0, ""), 5));
  CHECK(store.size() == kMaxStatusEntries);
  store.forget("t0", "a", 0);
  CHECK(store.record("other", "a", 1, report(1, 0, ""), 0));
}
