#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "controld/mesh/cluster_view.h"

using ot::ManualClock;
using ot::mesh::BridgeEntry;
using ot::mesh::BridgeTable;
using ot::mesh::buildClusterView;
using ot::mesh::ClusterView;
using ot::mesh::MachineLife;
using ot::mesh::MeshGauges;
using ot::mesh::PeerLink;
using ot::mesh::PeerState;
using ot::mesh::SelfSummary;
using ot::mesh::TableUpdate;

namespace {

constexpr int64_t kViewNow = 1'800'000'000'000;

MachineLife life(std::string id, uint64_t epoch, std::string address) {
  MachineLife result;
  result.machineId = std::move(id);
  result.epoch = epoch;
  result.startedAtMs = kViewNow - 5'000;
  result.internalAddress = std::move(address);
  result.region = "lhr";
  return result;
}

BridgeEntry viewBridge(std::string id, std::string tunnel, std::vector<std::string> routes) {
  BridgeEntry result;
  result.bridgeId = std::move(id);
  result.tunnelId = std::move(tunnel);
  result.routes = std::move(routes);
  result.attachedAtMs = kViewNow - 100;
  return result;
}

struct Cluster {
  ManualClock clock{kViewNow};
  BridgeTable table{"m0", clock.clock()};
  SelfSummary self;

  Cluster() {
    self.life = life("m0", 42, "127.0.0.10");
    self.sequence = 9;
    self.bridges = 4;
    self.tunnels = 3;
    self.routes = 5;
    REQUIRE(table.applySnapshot(
                life("m2", 5, "127.0.0.12"), 17,
                {viewBridge("b1", "alpha", {"web", "api"}), viewBridge("b2", "alpha", {"web"}),
                 viewBridge("b3", "beta", {"web"})}) == TableUpdate::kApplied);
    REQUIRE(table.applySnapshot(life("m1", 3, "127.0.0.11"), 2, {}) == TableUpdate::kApplied);
    REQUIRE(table.setDraining("m1", 3, true) == TableUpdate::kApplied);
  }
};

}  // namespace

TEST_CASE("cluster view: this machine first, then each peer's bridges, tunnels and routes") {
  Cluster cluster;
  const ClusterView view = buildClusterView(
      cluster.table, cluster.self,
      {{"127.0.0.12:9000", "m2", PeerState::kUp}, {"127.0.0.11:9000", "m1", PeerState::kUp}});
  REQUIRE(view.machines.size() == 3);
  CHECK(view.machines[0].self);
  CHECK(view.machines[0].summary.life.machineId == "m0");
  CHECK(view.machines[0].summary.bridges == 4);
  CHECK(view.machines[1].summary.life.machineId == "m1");
  CHECK(view.machines[1].summary.life.draining);
  CHECK(view.machines[1].summary.bridges == 0);
  const auto& m2 = view.machines[2].summary;
  CHECK_FALSE(view.machines[2].self);
  CHECK(m2.life.machineId == "m2");
  CHECK(m2.life.epoch == 5);
  CHECK(m2.sequence == 17);
  CHECK(m2.bridges == 3);
  CHECK(m2.tunnels == 2);
  CHECK(m2.routes == 3);  // alpha/web, alpha/api, beta/web
  CHECK_FALSE(m2.life.draining);
  CHECK(view.complete);
  CHECK(view.peersUp == 2);
  CHECK(view.peers.front().address == "127.0.0.11:9000");
}

TEST_CASE("cluster view: complete only while every known peer is up") {
  Cluster cluster;
  CHECK(buildClusterView(cluster.table, cluster.self, {}).complete);  // one machine alone
  ClusterView view = buildClusterView(cluster.table, cluster.self,
                                      {{"127.0.0.12:9000", "m2", PeerState::kUp},
                                       {"127.0.0.13:9000", "", PeerState::kConnecting},
                                       {"127.0.0.14:9000", "", PeerState::kUnreachable}});
  CHECK_FALSE(view.complete);
  CHECK(view.peersUp == 1);
  CHECK(view.peersConnecting == 1);
  CHECK(view.peersUnreachable == 1);
  view = buildClusterView(
      cluster.table, cluster.self,
      {{"127.0.0.12:9000", "m2", PeerState::kUp}, {"127.0.0.13:9000", "", PeerState::kConnecting}});
  CHECK_FALSE(view.complete);
}

TEST_CASE("cluster view: the gauges carry machines and peer states, never tunnels") {
  Cluster cluster;
  const MeshGauges gauges =
      ot::mesh::meshGauges(cluster.table, cluster.self,
                           {{"127.0.0.12:9000", "m2", PeerState::kUp},
                            {"127.0.0.13:9000", "", PeerState::kUnreachable}});
  CHECK(gauges.peersUp == 1);
  CHECK(gauges.peersConnecting == 0);
  CHECK(gauges.peersUnreachable == 1);
  const std::vector<std::pair<std::string, size_t>> expected{{"m0", 4}, {"m1", 0}, {"m2", 3}};
  CHECK(gauges.bridgesByMachine == expected);
}

TEST_CASE("cluster view: the admin stats' JSON") {
  Cluster cluster;
  const ClusterView view = buildClusterView(
      cluster.table, cluster.self,
      {{"127.0.0.13:9000", "", PeerState::kConnecting}, {"127.0.0.12:9000", "m2", PeerState::kUp}});
  const nlohmann::ordered_json json = ot::mesh::clusterViewJson(view);
  CHECK(json["complete"] == false);
  CHECK(json["peers_up"] == 1);
  CHECK(json["peers_connecting"] == 1);
  REQUIRE(json["machines"].size() == 3);
  CHECK(json["machines"][0]["machine"] == "m0");
  CHECK(json["machines"][0]["self"] == true);
  CHECK(json["machines"][2]["machine"] == "m2");
  CHECK(json["machines"][2]["bridges"] == 3);
  CHECK(json["machines"][2]["tunnels"] == 2);
  CHECK(json["machines"][2]["routes"] == 3);
  CHECK(json["machines"][2]["sequence"] == 17);
  CHECK(json["machines"][2]["epoch"] == 5);
  CHECK(json["machines"][1]["draining"] == true);
  CHECK(json["machines"][2]["address"] == "127.0.0.12");
  CHECK(json["peers"][0]["address"] == "127.0.0.12:9000");
  CHECK(json["peers"][0]["state"] == "up");
  CHECK(json["peers"][1]["machine"].is_null());
  CHECK(json["peers"][1]["state"] == "connecting");
}
