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

// What the store is given: the report and the text it was parsed from.
bool record(StatusStore& store, const std::string& tunnel, const std::string& origin,
            uint64_t bridgeKey, const StatusReport& r, uint64_t nowMs) {
  return store.record(tunnel, origin, bridgeKey, r, ot::bridge::serializeStatus(r), nowMs);
}

}  // namespace

TEST_CASE("status store: bridges and reports per origin and profile") {
  StatusStore store;
  const std::vector<StatusBridge> bridges = {
      {"a", "main", 0, 3}, {"a", "main", 0, 1}, {"b", "main", 0, 0}, {"", "", 0, 2}};
  REQUIRE(record(store, "t1", "a", 11, report(2, 5000, "connection refused"), 1000));
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
  REQUIRE(record(store, "t", "a", 1, report(0, 1000, "old"), 0));
  REQUIRE(record(store, "t", "a", 2, report(2, 300, "new"), 100));
  const auto reply = store.reply("t", {{"a", "main", 0, 0}}, 5000);
  REQUIRE(reply.origins_size() == 1);
  CHECK(reply.origins(0).profiles(0).links_up() == 2);
  CHECK(reply.origins(0).profiles(1).last_error() == "new");
  CHECK(reply.origins(0).profiles(1).next_try_ms() == 0);
  CHECK(store.size() == 1);
}

TEST_CASE("status store: a report goes with the last bridge that sent one") {
  StatusStore store;
  REQUIRE(record(store, "t", "a", 1, report(2, 0, ""), 0));
  REQUIRE(record(store, "t", "a", 2, report(2, 0, ""), 0));
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
    REQUIRE(record(store, "t" + std::to_string(i), "a", i, report(1, 0, ""), 0));
  CHECK_FALSE(record(store, "other", "a", 1, report(1, 0, ""), 0));
  CHECK(store.dropped() == 1);
  // A known entry is still refreshed.
  CHECK(record(store, "t0", "a", 0, report(2, 0, ""), 5));
  CHECK(store.size() == kMaxStatusEntries);
  store.forget("t0", "a", 0);
  CHECK(record(store, "other", "a", 1, report(1, 0, ""), 0));
}

TEST_CASE("status store: the text of the stored report only refreshes it") {
  StatusStore store(8);
  const std::string first = ot::bridge::serializeStatus(report(2, 0, ""));
  const std::string second = ot::bridge::serializeStatus(report(1, 900, "refused"));
  // Nothing stored: the caller parses and records.
  CHECK_FALSE(store.touch("t", "a", 1, first, 0));
  REQUIRE(store.record("t", "a", 1, report(2, 0, ""), first, 0));
  // The same text again, from this bridge or another link of the origin: its age starts over.
  CHECK(store.touch("t", "a", 1, first, 4000));
  CHECK(store.touch("t", "a", 2, first, 5000));
  auto reply = store.reply("t", {{"a", "main", 0, 0}}, 5500);
  CHECK(reply.origins(0).report_age_ms() == 500);
  // Bridge 2 now counts as a sender: the report outlives bridge 1.
  store.forget("t", "a", 1);
  CHECK(store.size() == 1);
  // Another text is not a refresh; recorded, it replaces the stored report.
  CHECK_FALSE(store.touch("t", "a", 2, second, 6000));
  REQUIRE(store.record("t", "a", 2, report(1, 900, "refused"), second, 6000));
  CHECK_FALSE(store.touch("t", "a", 2, first, 7000));
  CHECK(store.touch("t", "a", 2, second, 7000));
  reply = store.reply("t", {{"a", "main", 0, 0}}, 7000);
  CHECK(reply.origins(0).profiles(1).last_error() == "refused");
  // Another origin or tunnel with the same text is its own entry.
  CHECK_FALSE(store.touch("t", "b", 2, second, 7000));
  CHECK_FALSE(store.touch("u", "a", 2, second, 7000));
}

TEST_CASE("status store: the bound is the one given") {
  StatusStore store(2);
  CHECK(record(store, "t1", "a", 1, report(1, 0, ""), 0));
  CHECK(record(store, "t2", "a", 2, report(1, 0, ""), 0));
  CHECK_FALSE(record(store, "t3", "a", 3, report(1, 0, ""), 0));
  CHECK(store.dropped() == 1);
}

TEST_CASE("status store: a bridge's known entry refreshes without a lookup, until its forget") {
  StatusStore store(8);
  const std::string first = ot::bridge::serializeStatus(report(2, 0, ""));
  const std::string second = ot::bridge::serializeStatus(report(1, 900, "refused"));
  ot::relayd::StatusEntry* one = nullptr;
  ot::relayd::StatusEntry* two = nullptr;
  // Nothing stored: a touch leaves the pointer unset; the record sets it.
  CHECK_FALSE(store.touch("t", "a", 1, first, 0, &one));
  CHECK(one == nullptr);
  REQUIRE(store.record("t", "a", 1, report(2, 0, ""), first, 0, &one));
  REQUIRE(one != nullptr);
  // Another link of the origin finds the entry by its key once, then holds it too.
  CHECK(store.touch("t", "a", 2, first, 1000, &two));
  CHECK(two == one);
  // Entries added later (a rehash) do not move it.
  for (int i = 0; i < 6; ++i)
    REQUIRE(record(store, "t" + std::to_string(i), "a", 10, report(1, 0, ""), 0));
  CHECK(store.touch("t", "a", 1, first, 3000, &one));
  CHECK(store.reply("t", {{"a", "main", 0, 0}}, 3500).origins(0).report_age_ms() == 500);
  // A new text through the pointer replaces the report in the same entry.
  CHECK_FALSE(store.touch("t", "a", 1, second, 4000, &one));
  REQUIRE(store.record("t", "a", 1, report(1, 900, "refused"), second, 4000, &one));
  CHECK(one == two);
  CHECK(store.touch("t", "a", 2, second, 5000, &two));
  CHECK(store.reply("t", {{"a", "main", 0, 0}}, 5000).origins(0).profiles(1).last_error() ==
        "refused");
  // Bridge 1 goes: its pointer is cleared, the entry stays for bridge 2, which still uses its own.
  store.forget("t", "a", 1, &one);
  CHECK(one == nullptr);
  CHECK(store.touch("t", "a", 2, second, 6000, &two));
  CHECK(store.reply("t", {{"a", "main", 0, 0}}, 6000).origins(0).report_age_ms() == 0);
  // The last sender goes: so does the entry.
  store.forget("t", "a", 2, &two);
  CHECK(two == nullptr);
  CHECK_FALSE(store.reply("t", {{"a", "main", 0, 0}}, 6000).origins(0).reported());
}
