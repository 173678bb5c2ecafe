// The admin stats (docs/api.md "Admin"): the store's grouped counts on SQLite and MariaDB, the
// response body built from its inputs, relayd's figures as the relay hub keeps them, and the
// route's token check.
#include "controld/admin/admin_stats.h"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "controld/api/admin_routes.h"
#include "controld/api/api_docs.h"
#include "controld/relays/relay_hub.h"
#include "tests/controld/test_database.h"

namespace ot::controld {
namespace {

using Json = nlohmann::json;
using testing::sampleTunnel;
using testing::testDatabases;

constexpr int64_t kStatsNow = 1'750'000'000'000;

Job job(const std::string& id, int64_t nextRunAtMs) {
  Job out;
  out.id = id;
  out.kind = JobKind::kIssue;
  out.tunnelId = "t" + id;
  out.queuedAtMs = kStatsNow - 1000;
  out.nextRunAtMs = nextRunAtMs;
  return out;
}

TEST_CASE("admin stats: the store counts tunnels by state and jobs by status") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    const RecordCounts empty = store->recordCounts(kStatsNow).value();
    CHECK(empty.tunnels == 0);
    CHECK(empty.deleted == 0);
    CHECK(empty.jobsPending == 0);

    REQUIRE(store->insertTunnel(sampleTunnel("plain")).ok());
    TunnelRecord issuing = sampleTunnel("issuing");
    issuing.certificate.state = CertificateState::kIssuing;
    REQUIRE(store->insertTunnel(issuing).ok());
    TunnelRecord renewing = sampleTunnel("renewing");
    renewing.renewAtMs = kStatsNow + 1000;
    REQUIRE(store->insertTunnel(renewing).ok());
    TunnelRecord gone = sampleTunnel("gone");
    gone.deletedAtMs = kStatsNow - 5;
    gone.renewAtMs = kStatsNow + 1000;  // a deleted tunnel is only counted as deleted
    REQUIRE(store->insertTunnel(gone).ok());

    REQUIRE(store->addJob(job("a", kStatsNow)).value());
    REQUIRE(store->addJob(job("b", kStatsNow)).value());
    REQUIRE(store->addJob(job("c", kStatsNow + 60'000)).value());
    auto claimed = store->claimJob("machine-1", kStatsNow, 60'000, true);
    REQUIRE(claimed.ok());
    REQUIRE(claimed->has_value());
    Job finished = **claimed;
    finished.status = JobStatus::kDone;
    REQUIRE(store->finishJob(finished, "machine-1").value());
    auto leased = store->claimJob("machine-1", kStatsNow, 60'000, true);
    REQUIRE(leased.ok());
    REQUIRE(leased->has_value());

    const RecordCounts counts = store->recordCounts(kStatsNow).value();
    CHECK(counts.tunnels == 3);
    CHECK(counts.deleted == 1);
    CHECK(counts.issuing == 1);
    CHECK(counts.alarms == 1);
    CHECK(counts.jobsPending == 2);
    CHECK(counts.jobsLeased == 1);
    CHECK(counts.jobsDone == 1);
    CHECK(counts.jobsFailed == 0);
    // A lease that ran out is no longer counted as held.
    CHECK(store->recordCounts(kStatsNow + 120'000).value().jobsLeased == 0);
  }
}

mesh::MachineLife life(const std::string& id, const std::string& region) {
  mesh::MachineLife out;
  out.machineId = id;
  out.region = region;
  out.epoch = 7;
  out.internalAddress = "127.0.0.11:9000";
  return out;
}

TEST_CASE("admin stats: the body carries the counts, this machine and its cluster view") {
  AdminStatsInputs inputs;
  inputs.records.tunnels = 5;
  inputs.records.deleted = 2;
  inputs.records.jobsPending = 3;
  inputs.bridges = BridgeTotals{1, 4, 2};
  inputs.machineId = "m-self";
  inputs.region = "ams";
  inputs.openFds = 42;
  inputs.threads = 9;

  Json body = Json::parse(adminStatsJson(inputs).dump());
  CHECK(body["tunnels"] == 5);
  CHECK(body["deleted"] == 2);
  CHECK(body["jobs"]["pending"] == 3);
  CHECK(body["bridges"] == 4);
  CHECK(body["tunnels_online"] == 2);
  CHECK(body["relays"] == 1);
  CHECK(body["machine"]["id"] == "m-self");
  CHECK(body["machine"]["region"] == "ams");
  CHECK(body["machine"]["fds"] == 42);
  CHECK(body["machine"]["threads"] == 9);
  CHECK(body["cluster"].is_null());

  mesh::ClusterView view;
  view.machines.push_back({mesh::MachineSummary{life("m-self", "ams"), 3, 4, 2, 2}, true});
  view.machines.push_back({mesh::MachineSummary{life("m-peer", "fra"), 9, 6, 1, 1}, false});
  view.machines.push_back({mesh::MachineSummary{life("m-third", "ams"), 1, 1, 1, 1}, false});
  view.peers.push_back({"127.0.0.12:9000", "m-peer", mesh::PeerState::kUp});
  view.peersUp = 1;
  inputs.cluster = view;
  body = Json::parse(adminStatsJson(inputs).dump());
  CHECK(body["cluster"]["bridges"] == 11);
  CHECK(body["cluster"]["bridges_by_region"] == Json{{"ams", 5}, {"fra", 6}});
  REQUIRE(body["cluster"]["machines"].size() == 3);
  CHECK(body["cluster"]["machines"][0]["self"] == true);
  CHECK(body["cluster"]["machines"][1]["machine"] == "m-peer");
  CHECK(body["cluster"]["peers"][0]["state"] == "up");
}

cv1::RelayStats relayStats(uint64_t open, uint64_t forwardedOut, uint64_t refused) {
  cv1::RelayStats stats;
  stats.set_taken_at_unix_ms(kStatsNow);
  stats.set_visitor_connections_open(open);
  stats.set_bridges_attached(2);
  (*stats.mutable_visitor_connections())["served_local"] = 5;
  (*stats.mutable_visitor_connections())["forwarded_out"] = forwardedOut;
  (*stats.mutable_visitor_connections())["forwarded_in"] = 1;
  (*stats.mutable_forward_failures())["refused"] = refused;
  (*stats.mutable_forward_failures())["io"] = 0;
  stats.set_mesh_lookups_hit(forwardedOut + refused);
  stats.set_mesh_lookups_miss(4);
  return stats;
}

TEST_CASE("admin stats: relayd's figures come with its Counters and show as this machine's") {
  BridgeRegistry registry;
  RelayHub hub(registry);
  cv1::Hello hello;
  hello.set_machine_id("m-self");
  hello.set_epoch(1);
  auto session = hub.open(hello, [] {});
  REQUIRE(session != nullptr);
  REQUIRE(hub.relays().size() == 1);
  CHECK_FALSE(hub.relays()[0].figures.has_value());  // an older relayd never sends them

  // Usage alone leaves the figures as they were; a Counters with `relay` replaces them.
  cv1::Counters usage;
  usage.add_tunnels()->set_tunnel_id("t1");
  hub.counters(session, usage);
  CHECK_FALSE(hub.relays()[0].figures.has_value());
  cv1::Counters counters;
  *counters.mutable_relay() = relayStats(3, 7, 1);
  hub.counters(session, counters);
  *counters.mutable_relay() = relayStats(1, 9, 2);
  hub.counters(session, counters);
  REQUIRE(hub.relays()[0].figures.has_value());
  const RelayFigures figures = *hub.relays()[0].figures;
  CHECK(figures.visitorConnectionsOpen == 1);
  CHECK(figures.bridgesAttached == 2);
  CHECK(figures.visitors.at("forwarded_out") == 9);
  CHECK(figures.visitors.at("forwarded_in") == 1);
  CHECK(figures.forwardFailures.at("refused") == 2);
  CHECK(figures.meshLookupsHit == 11);
  CHECK(figures.meshLookupsMiss == 4);
  CHECK(figures.takenAtMs == kStatsNow);

  AdminStatsInputs inputs;
  Json body = Json::parse(adminStatsJson(inputs).dump());
  CHECK(body["relayd"].is_null());
  inputs.relayd = figures;
  body = Json::parse(adminStatsJson(inputs).dump());
  const Json& relayd = body["relayd"];
  CHECK(relayd["visitor_connections_open"] == 1);
  CHECK(relayd["bridges_attached"] == 2);
  CHECK(relayd["visitor_connections"]["served_local"] == 5);
  CHECK(relayd["visitor_connections"]["forwarded_out"] == 9);
  CHECK(relayd["visitor_connections"]["forwarded_in"] == 1);
  CHECK(relayd["forward_failures"] == Json{{"io", 0}, {"refused", 2}});
  CHECK(relayd["mesh_lookups"] == Json{{"hit", 11}, {"miss", 4}});
  CHECK(relayd["taken_at_ms"] == kStatsNow);

  // Two sessions on one controld: the machine's total, the newest reading's time.
  RelayFigures other = relayFiguresFromProto(relayStats(2, 1, 0));
  other.takenAtMs = kStatsNow + 5;
  addRelayFigures(*inputs.relayd, other);
  CHECK(inputs.relayd->visitorConnectionsOpen == 3);
  CHECK(inputs.relayd->visitors.at("forwarded_out") == 10);
  CHECK(inputs.relayd->visitors.at("served_local") == 10);
  CHECK(inputs.relayd->takenAtMs == kStatsNow + 5);

  // A relayd cannot make controld keep an unbounded map.
  cv1::RelayStats flood;
  for (int i = 0; i < 1000; ++i)
    (*flood.mutable_visitor_connections())["k" + std::to_string(i)] = 1;
  (*flood.mutable_forward_failures())[std::string(500, 'x')] = 1;
  const RelayFigures bounded = relayFiguresFromProto(flood);
  CHECK(bounded.visitors.size() == kMaxFigureEntries);
  CHECK(bounded.forwardFailures.empty());
}

ApiRequest statsRequest(std::optional<std::string> authorization) {
  ApiRequest request;
  request.method = "POST";
  request.path = "/api/admin/stats";
  if (authorization) request.headers.emplace_back("Authorization", *authorization);
  return request;
}

TEST_CASE("admin stats: the route needs ADMIN_TOKEN and exists only with one") {
  int gathered = 0;
  AdminApi admin{"an-admin-token", [&]() -> Result<AdminStatsInputs> {
                   ++gathered;
                   AdminStatsInputs inputs;
                   inputs.records.tunnels = 12;
                   return inputs;
                 }};

  ApiRouter without;
  addApiSchemas(without);
  addAdminRoutes(without, AdminApi{});
  CHECK(without.handle(statsRequest("Bearer an-admin-token")).status == 404);

  ApiRouter router;
  addApiSchemas(router);
  addAdminRoutes(router, admin);
  CHECK(router.handle(statsRequest(std::nullopt)).status == 401);
  CHECK(router.handle(statsRequest("Bearer another-token")).status == 401);
  CHECK(router.handle(statsRequest("Bearer an-admin-token-longer")).status == 401);
  CHECK(router.handle(statsRequest("Basic an-admin-token")).status == 401);
  CHECK(gathered == 0);

  const ApiResponse ok = router.handle(statsRequest("bearer  an-admin-token "));
  CHECK(ok.status == 200);
  CHECK(gathered == 1);
  CHECK(Json::parse(ok.body)["tunnels"] == 12);

  ApiRouter failing;
  addApiSchemas(failing);
  addAdminRoutes(failing, AdminApi{"an-admin-token", []() -> Result<AdminStatsInputs> {
                                     return Error{ErrorKind::kUnavailable, "down"};
                                   }});
  const ApiResponse down = failing.handle(statsRequest("Bearer an-admin-token"));
  CHECK(down.status == 503);
  CHECK(Json::parse(down.body)["_tag"] == "ServiceUnavailableError");
}

}  // namespace
}  // namespace ot::controld
