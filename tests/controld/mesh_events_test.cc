// The mesh's events (controld/mesh/mesh_events.h): a peer's event makes this machine read the
// tunnel again from the store and push what the store says to its relays; the event itself never
// decides. Local changes pass through to the relays and the job runner.
#include "controld/mesh/mesh_events.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tests/controld/recording_publisher.h"
#include "tests/controld/test_database.h"

namespace ot::mesh {
namespace {

using controld::test_support::RecordingPublisher;
using controld::testing::sampleTunnel;
using controld::testing::testDatabases;

class CountingNotifier final : public controld::JobNotifier {
 public:
  void jobAdded() override { ++count; }
  std::atomic<int> count{0};
};

template <typename Predicate>
bool eventually(Predicate&& predicate) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (predicate()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return predicate();
}

TEST_CASE("mesh events: a peer's event is applied as the store has the tunnel") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    REQUIRE(store->insertTunnel(sampleTunnel("alive")).ok());
    controld::TunnelRecord gone = sampleTunnel("gone");
    gone.deletedAtMs = 1'700'000'000'500;
    REQUIRE(store->insertTunnel(gone).ok());

    RecordingPublisher relays;
    CountingNotifier jobs;
    PeerEventApplier applier(*store, relays, jobs);
    applier.start();

    // A deletion the database does not confirm pushes the record as stored.
    applier.apply(TunnelDeleted{"alive"});
    REQUIRE(eventually([&] { return relays.recordsOf("alive").size() == 1; }));
    CHECK_FALSE(relays.recordsOf("alive")[0].record.deleted());
    // A confirmed one goes out as a deletion (the hub turns a deleted record into one).
    applier.apply(CertificateChanged{"gone", CertificateChange::kReady});
    REQUIRE(eventually([&] { return relays.recordsOf("gone").size() == 1; }));
    CHECK(relays.recordsOf("gone")[0].record.deleted());
    // Not in the store: a deletion event deletes, a creation event does nothing.
    applier.apply(TunnelCreated{"unknown"});
    applier.apply(TunnelDeleted{"missing"});
    REQUIRE(eventually([&] { return relays.deleted().size() == 1; }));
    CHECK(relays.deleted()[0] == "missing");
    CHECK(relays.recordsOf("unknown").empty());
    applier.apply(JobEnqueued{});
    REQUIRE(eventually([&] { return jobs.count == 1; }));
    applier.stop();
  }
}

TEST_CASE("mesh events: a link that comes up rechecks the relays and finds lost deletions") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    // More tunnels with a bridge here than one query takes: the check goes in batches.
    std::vector<std::string> local;
    for (int i = 0; i < 1'010; ++i) {
      local.push_back("t" + std::to_string(i));
      controld::TunnelRecord record = sampleTunnel(local.back());
      if (i == 7 || i == 777) record.deletedAtMs = 1'700'000'000'500;  // deleted meanwhile
      REQUIRE(store->insertTunnel(record).ok());
    }
    controld::TunnelRecord elsewhere = sampleTunnel("elsewhere");  // deleted, no bridge here
    elsewhere.deletedAtMs = 1'700'000'000'500;
    REQUIRE(store->insertTunnel(elsewhere).ok());
    local.emplace_back("unknown");  // not in the store: no deletion without one recorded

    auto direct = store->deletedAmong(local);
    REQUIRE(direct.ok());
    std::sort(direct->begin(), direct->end());
    CHECK(*direct == std::vector<std::string>{"t7", "t777"});
    CHECK(store->deletedAmong({}).value().empty());

    RecordingPublisher relays;
    CountingNotifier jobs;
    PeerEventApplier applier(*store, relays, jobs);
    applier.start();
    applier.linkUp("machine-b", local);
    REQUIRE(eventually([&] { return relays.deleted().size() == 2; }));
    CHECK(relays.rechecks() == std::vector<std::string>{"machine-b"});
    auto deleted = relays.deleted();
    std::sort(deleted.begin(), deleted.end());
    CHECK(deleted == std::vector<std::string>{"t7", "t777"});
    CHECK(relays.records().empty());  // nothing else pushed

    // No bridge here: the relays are still told, the store is not asked.
    applier.linkUp("machine-c", {});
    REQUIRE(eventually([&] { return relays.rechecks().size() == 2; }));
    CHECK(relays.deleted().size() == 2);
    applier.stop();
  }
}

TEST_CASE("mesh events: local changes reach the relays and the job runner without a mesh") {
  RecordingPublisher relays;
  CountingNotifier jobs;
  MeshEventPublisher publisher(relays, [] { return static_cast<MeshNode*>(nullptr); });
  publisher.setLocalNotifier(&jobs);
  publisher.publishRecord(controld::StoredTunnel{sampleTunnel("t"), 1});
  publisher.publishDeleted("u");
  publisher.jobAdded();
  CHECK(relays.recordsOf("t").size() == 1);
  CHECK(relays.deleted() == std::vector<std::string>{"u"});
  CHECK(jobs.count == 1);
}

}  // namespace
}  // namespace ot::mesh
