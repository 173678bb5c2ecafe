// The mesh node over real sockets (controld/mesh/mesh_node.h; docs/mesh.md "How it is wired"):
// nodes on 127.0.0.11/.12/.13 in one process, each with a FakeRelayd handing its inbound links over
// on MESH_HANDOFF_SOCKET, and hand-driven RawPeers for what a real node never sends.
#include "controld/mesh/mesh_node.h"

#include <doctest/doctest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/metrics.h"
#include "controld/relays/bridge_registry.h"
#include "tests/controld/mesh_test_peer.h"

using namespace ot::mesh;
using ot::mesh::testing::FakeRelayd;
using ot::mesh::testing::RawPeer;
using ot::mesh::testing::waitFor;

namespace {

const std::string kToken = "0123456789abcdef0123456789abcdef-mesh-node-test-token";

std::string tempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "ot-mesh-XXXXXX").string();
  return ::mkdtemp(pattern.data());
}

// One machine: its node, its registry (the node observes it) and its fake relayd.
struct Machine {
  Machine(const std::string& id, const std::string& ip, std::vector<std::string> peers,
          std::string token = kToken, int64_t pingMs = 100, int64_t deadMs = 500,
          int64_t higherDelayMs = 2'000, uint16_t port = 0)
      : relayd(ip, port), dir(tempDir()) {
    settings.machineId = id;
    settings.region = "test";
    settings.token = std::move(token);
    settings.internalAddress = HostPort{ip, relayd.port()};
    for (const auto& peer : peers) settings.peers.push_back(*parseHostPort(peer));
    settings.pingMs = pingMs;
    settings.deadMs = deadMs;
    settings.higherAddressDelayMs = higherDelayMs;
    settings.handoffSocket = dir + "/mesh-handoff.sock";
    settings.relayWaitMs = 0;  // no relayd session here: link at once (mesh_alive_test.cc waits)
  }
  ~Machine() {
    registry.setObserver(nullptr);
    if (node) node->stop();
    relayd.stop();
    std::filesystem::remove_all(dir);
  }
  void start() {
    node = std::make_unique<MeshNode>(settings, metrics);
    if (linkUp) node->setLinkUp(linkUp);
    if (feedSink.snapshot) node->routeFeed().setSink(feedSink);
    REQUIRE(node->start().ok());
    REQUIRE(relayd.serve(settings.handoffSocket));
    registry.setObserver(node.get());
  }
  [[nodiscard]] std::string address() const { return settings.internalAddress.toString(); }
  [[nodiscard]] MeshNodeStatus status() const { return node->status(); }
  [[nodiscard]] std::vector<BridgeEntry> bridgesOf(const std::string& machine) const {
    auto s = node->status();
    auto found = s.bridges.find(machine);
    return found == s.bridges.end() ? std::vector<BridgeEntry>{} : found->second;
  }
  [[nodiscard]] double counter(const std::string& line) const {
    const std::string text = metrics.render();
    const size_t at = text.find(line + " ");
    return at == std::string::npos ? -1 : std::stod(text.substr(at + line.size() + 1));
  }

  FakeRelayd relayd;
  std::string dir;
  MeshSettings settings;
  ot::metrics::Metrics metrics;
  ot::controld::BridgeRegistry registry;
  std::unique_ptr<MeshNode> node;
  MeshNode::LinkUpHandler linkUp;  // set before start()
  RouteFeedSink feedSink;          // relayd's copy of the table; set before start()
};

ot::controld::BridgeEntry localBridge(const std::string& id, const std::string& tunnel,
                                      std::vector<std::string> routes = {""}) {
  ot::controld::BridgeEntry bridge;
  bridge.bridgeId = id;
  bridge.tunnelId = tunnel;
  bridge.routes = std::move(routes);
  bridge.attachedAtMs = ot::unixNowMs();
  return bridge;
}

std::vector<std::string> bridgeIds(const std::vector<BridgeEntry>& bridges) {
  std::vector<std::string> ids;
  for (const auto& bridge : bridges) ids.push_back(bridge.bridgeId);
  return ids;
}

Frame helloFrame(const std::string& machine, const std::string& address, uint64_t epoch = 7,
                 int64_t startedAtMs = 1'000) {
  return Frame{ot::unixNowMs(),
               Hello{kLinkFormatVersion, machine, "test", address, epoch, startedAtMs, false}};
}

Frame snapshotFrame(uint64_t sequence, std::vector<std::string> bridgeIdsToSend) {
  SnapshotPart part;
  part.sequence = sequence;
  for (const auto& id : bridgeIdsToSend) {
    part.bridges.push_back(BridgeEntry{"", "tunnel" + id, id, {""}, ot::unixNowMs(), {}, 0});
  }
  return Frame{ot::unixNowMs(), std::move(part)};
}

bool linkedTo(const Machine& machine, std::vector<std::string> expected) {
  return machine.status().linkedMachines == expected;
}

}  // namespace

TEST_CASE("mesh node: three machines link once per pair, snapshot then deltas reach the peers") {
  // Every node dials at once (no 2 s wait for the higher address), so both links of each pair
  // come up and the tie-break must keep the same one on both sides.
  Machine a("m-a", "127.0.0.11", {}, kToken, 100, 500, 0);
  Machine b("m-b", "127.0.0.12", {}, kToken, 100, 500, 0);
  Machine c("m-c", "127.0.0.13", {}, kToken, 100, 500, 0);
  a.settings.peers = {*parseHostPort(b.address()), *parseHostPort(c.address())};
  b.settings.peers = {*parseHostPort(a.address()), *parseHostPort(c.address())};
  c.settings.peers = {*parseHostPort(a.address()), *parseHostPort(b.address())};
  a.start();
  a.registry.replaceRelay("relay-a", {localBridge("a1", "alpha", {"", "api"})});
  b.start();
  c.start();

  REQUIRE(waitFor([&] {
    return linkedTo(a, {"m-b", "m-c"}) && linkedTo(b, {"m-a", "m-c"}) &&
           linkedTo(c, {"m-a", "m-b"});
  }));
  // One connection per pair: each node ends with exactly its two links open.
  REQUIRE(waitFor([&] {
    return a.status().openLinks == 2 && b.status().openLinks == 2 && c.status().openLinks == 2;
  }));
  CHECK(linkedTo(a, {"m-b", "m-c"}));
  // Both machines of a pair kept the same link: neither ever tore down one it had admitted.
  for (Machine* machine : {&a, &b, &c}) {
    CHECK(machine->counter("opentunnel_mesh_links_total{event=\"down\"}") == 0);
    CHECK(machine->counter("opentunnel_mesh_links_total{event=\"up\"}") >= 2);
  }
  for (Machine* machine : {&a, &b, &c}) {
    for (const auto& peer : machine->status().peers) CHECK(peer.state == PeerState::kUp);
  }

  // The snapshot: a1 with both its routes, held by m-a, on both peers.
  REQUIRE(waitFor([&] { return bridgeIds(b.bridgesOf("m-a")) == std::vector<std::string>{"a1"}; }));
  REQUIRE(waitFor([&] { return bridgeIds(c.bridgesOf("m-a")) == std::vector<std::string>{"a1"}; }));
  const auto a1 = b.bridgesOf("m-a").front();
  CHECK(a1.tunnelId == "alpha");
  CHECK(a1.routes == std::vector<std::string>{"", "api"});

  // Deltas, numbered by m-a's sequence, in order.
  a.registry.attached("relay-a", localBridge("a2", "beta"));
  a.registry.detached("relay-a", "a1");
  REQUIRE(waitFor([&] { return bridgeIds(b.bridgesOf("m-a")) == std::vector<std::string>{"a2"}; }));
  REQUIRE(waitFor([&] { return bridgeIds(c.bridgesOf("m-a")) == std::vector<std::string>{"a2"}; }));
  CHECK(a.status().sequence == 3);  // a1 attached, a2 attached, a1 detached

  // A relay's whole set replaced: only the difference goes out.
  b.registry.replaceRelay("relay-b", {localBridge("b1", "gamma"), localBridge("b2", "gamma")});
  REQUIRE(waitFor([&] {
    return bridgeIds(a.bridgesOf("m-b")) == std::vector<std::string>{"b1", "b2"};
  }));
  b.registry.dropRelay("relay-b");
  REQUIRE(waitFor([&] { return a.bridgesOf("m-b").empty() && c.bridgesOf("m-b").empty(); }));
  // m-b's two attaches reached m-a as deltas (m-a's own never come back to it).
  CHECK(a.counter("opentunnel_mesh_propagation_seconds_count{kind=\"attached\"}") == 2);
  CHECK(a.counter("opentunnel_mesh_peers{state=\"up\"}") == 2);
}

TEST_CASE("mesh node: a silent peer is dropped after MESH_DEAD_MS, and the secret never goes out") {
  uint16_t rawPort = 0;
  const int rawListen = ot::mesh::testing::listenTcp("127.0.0.13", rawPort);
  Machine a("m-a", "127.0.0.11", {"127.0.0.13:" + std::to_string(rawPort)});
  a.start();
  a.registry.attached("relay-a", localBridge("a1", "alpha"));

  RawPeer raw(kToken, "m-raw");
  REQUIRE(raw.accept(ot::mesh::testing::acceptWithin(rawListen, 5'000)));
  CHECK(raw.peerMachine() == "m-a");
  const auto hello = raw.next();
  REQUIRE(hello);
  CHECK(std::get<Hello>(hello->body).address == a.address());
  const auto snapshot = raw.next();
  REQUIRE(snapshot);
  // The node dials at start, so a1 (attached from this thread) is in the snapshot or, when the
  // snapshot was taken first, the delta right after it.
  const auto& snapshotBridges = std::get<SnapshotPart>(snapshot->body).bridges;
  if (snapshotBridges.empty()) {
    const auto delta = raw.next();
    REQUIRE(delta);
    REQUIRE(std::holds_alternative<Attached>(delta->body));
    CHECK(std::get<Attached>(delta->body).bridge.bridgeId == "a1");
  } else {
    CHECK(bridgeIds(snapshotBridges) == std::vector<std::string>{"a1"});
  }

  REQUIRE(raw.send(helloFrame("m-raw", "127.0.0.13:" + std::to_string(rawPort))));
  REQUIRE(raw.send(snapshotFrame(4, {"r1"})));
  const auto lastFrameAt = std::chrono::steady_clock::now();
  REQUIRE(
      waitFor([&] { return bridgeIds(a.bridgesOf("m-raw")) == std::vector<std::string>{"r1"}; }));
  // Silence from here (the node's pings are read, never answered).
  REQUIRE(raw.closedByNode(5'000));
  const auto silentFor = std::chrono::steady_clock::now() - lastFrameAt;
  CHECK(silentFor >= std::chrono::milliseconds(450));
  // Its "relayd" (the raw listener, which never answers the liveness question) gets one ping
  // interval (100 ms) more before the entries go.
  CHECK(waitFor([&] { return a.bridgesOf("m-raw").empty(); }, 1'000));
  CHECK(a.counter("opentunnel_mesh_machines_dropped_total{reason=\"timeout\"}") == 1);
  CHECK(a.counter("opentunnel_mesh_link_errors_total{reason=\"dead\"}") == 1);
  // The node pinged while idle, and nowhere in what it sent is the token.
  CHECK(a.counter("opentunnel_mesh_frames_total{direction=\"out\",type=\"ping\"}") >= 1);
  CHECK(raw.received().find(kToken) == std::string::npos);
  ::close(rawListen);
}

TEST_CASE("mesh node: a closed link of a machine whose relayd is gone drops its entries at once") {
  uint16_t rawPort = 0;
  const int rawListen = ot::mesh::testing::listenTcp("127.0.0.13", rawPort);
  // A long dead time, so only the close can explain the drop.
  Machine a("m-a", "127.0.0.11", {"127.0.0.13:" + std::to_string(rawPort)}, kToken, 1'000, 30'000);
  a.start();
  RawPeer raw(kToken, "m-raw");
  REQUIRE(raw.accept(ot::mesh::testing::acceptWithin(rawListen, 5'000)));
  REQUIRE(raw.send(helloFrame("m-raw", "127.0.0.13:" + std::to_string(rawPort))));
  REQUIRE(raw.send(snapshotFrame(0, {"r1", "r2"})));
  REQUIRE(waitFor([&] { return a.bridgesOf("m-raw").size() == 2; }));
  ::close(rawListen);  // its internal address refuses the liveness question
  raw.closeSocket();
  const auto closedAt = std::chrono::steady_clock::now();
  REQUIRE(waitFor([&] { return a.bridgesOf("m-raw").empty(); }, 10'000));
  CHECK(std::chrono::steady_clock::now() - closedAt < std::chrono::milliseconds(5'000));
  CHECK(a.counter("opentunnel_mesh_links_total{event=\"down\"}") == 1);
  CHECK(a.counter("opentunnel_mesh_alive_checks_total{result=\"refused\"}") == 1);
}

TEST_CASE("mesh node: a machine's new life replaces its old entries the moment it links") {
  Machine b("m-b", "127.0.0.12", {});
  b.start();
  const std::string rawAddress = "127.0.0.13:9999";  // where forwards to m-raw would go
  RawPeer oldLife(kToken, "m-raw");
  REQUIRE(oldLife.dial("127.0.0.13", "127.0.0.12", b.relayd.port()));
  REQUIRE(oldLife.send(helloFrame("m-raw", rawAddress, 7, 1'000)));
  REQUIRE(oldLife.send(snapshotFrame(10, {"old1", "old2"})));
  REQUIRE(waitFor([&] { return b.bridgesOf("m-raw").size() == 2; }));

  // The restarted machine links while its old link is still open.
  RawPeer newLife(kToken, "m-raw");
  REQUIRE(newLife.dial("127.0.0.13", "127.0.0.12", b.relayd.port()));
  REQUIRE(newLife.send(helloFrame("m-raw", rawAddress, 3, 2'000)));
  REQUIRE(newLife.send(snapshotFrame(0, {"new1"})));
  REQUIRE(
      waitFor([&] { return bridgeIds(b.bridgesOf("m-raw")) == std::vector<std::string>{"new1"}; }));
  CHECK(oldLife.closedByNode(5'000));
  const auto machines = b.status().machines;
  REQUIRE(machines.size() == 1);
  CHECK(machines.front().life.epoch == 3);
  CHECK(b.status().linkedMachines == std::vector<std::string>{"m-raw"});
  // The old life cannot come back over a new link either.
  RawPeer stale(kToken, "m-raw");
  REQUIRE(stale.dial("127.0.0.13", "127.0.0.12", b.relayd.port()));
  REQUIRE(stale.send(helloFrame("m-raw", rawAddress, 7, 1'000)));
  CHECK(stale.closedByNode(5'000));
  CHECK(bridgeIds(b.bridgesOf("m-raw")) == std::vector<std::string>{"new1"});
  CHECK(b.counter("opentunnel_mesh_link_errors_total{reason=\"stale_life\"}") == 1);
}

TEST_CASE("mesh node: a wrong INTERNAL_TOKEN never links, and neither token goes on the wire") {
  uint16_t rawPort = 0;
  const int rawListen = ot::mesh::testing::listenTcp("127.0.0.13", rawPort);
  Machine a("m-a", "127.0.0.11", {"127.0.0.13:" + std::to_string(rawPort)});
  a.start();
  const std::string otherToken = "another-secret-that-is-long-enough-0123456789";
  std::string wire;
  for (int attempt = 0; attempt < 2; ++attempt) {
    RawPeer raw(otherToken, "m-raw");
    CHECK_FALSE(raw.accept(ot::mesh::testing::acceptWithin(rawListen, 5'000)));
    wire += raw.received();
  }
  REQUIRE(waitFor(
      [&] { return a.counter("opentunnel_mesh_link_errors_total{reason=\"bad_proof\"}") == 2; }));
  CHECK(a.status().linkedMachines.empty());
  REQUIRE(a.status().peers.size() == 1);
  CHECK(a.status().peers.front().state == PeerState::kUnreachable);
  CHECK(wire.find("OPENTUNNEL-MESH/2 m-a ") == 0);  // the node did talk
  CHECK(wire.find(kToken) == std::string::npos);
  CHECK(wire.find(otherToken) == std::string::npos);

  // Two real nodes with different tokens: neither ever links.
  Machine b("m-b", "127.0.0.12", {a.address()}, otherToken);
  b.start();
  REQUIRE(waitFor(
      [&] { return b.counter("opentunnel_mesh_link_errors_total{reason=\"bad_proof\"}") >= 2; }));
  CHECK(a.status().linkedMachines.empty());
  CHECK(b.status().linkedMachines.empty());
  ::close(rawListen);
}

TEST_CASE("mesh node: a hello naming another address than the connection's is refused") {
  Machine b("m-b", "127.0.0.12", {});
  b.start();
  RawPeer raw(kToken, "m-raw");
  REQUIRE(raw.dial("127.0.0.13", "127.0.0.12", b.relayd.port()));
  REQUIRE(raw.send(helloFrame("m-raw", "127.0.0.14:9000")));
  REQUIRE(raw.send(snapshotFrame(0, {"r1"})));
  CHECK(raw.closedByNode(5'000));
  CHECK(b.counter("opentunnel_mesh_link_errors_total{reason=\"wrong_address\"}") == 1);
  CHECK(b.status().linkedMachines.empty());
  CHECK(b.bridgesOf("m-raw").empty());
  CHECK(raw.received().find(kToken) == std::string::npos);
}

TEST_CASE("mesh node: a sequence gap closes the link, which comes back with a fresh snapshot") {
  uint16_t rawPort = 0;
  const int rawListen = ot::mesh::testing::listenTcp("127.0.0.13", rawPort);
  const std::string rawAddress = "127.0.0.13:" + std::to_string(rawPort);
  Machine a("m-a", "127.0.0.11", {rawAddress});
  a.start();
  a.registry.attached("relay-a", localBridge("a1", "alpha"));
  REQUIRE(waitFor([&] { return a.status().localBridges == 1; }));

  RawPeer first(kToken, "m-raw");
  REQUIRE(first.accept(ot::mesh::testing::acceptWithin(rawListen, 5'000)));
  REQUIRE(first.next());  // hello
  REQUIRE(first.next());  // snapshot
  REQUIRE(first.send(helloFrame("m-raw", rawAddress)));
  REQUIRE(first.send(snapshotFrame(5, {"r1"})));
  REQUIRE(
      first.send(Frame{ot::unixNowMs(), Attached{6, BridgeEntry{"", "t", "r2", {""}, 1, {}, 0}}}));
  REQUIRE(waitFor([&] { return a.bridgesOf("m-raw").size() == 2; }));
  // 8 after 6: a gap.
  REQUIRE(
      first.send(Frame{ot::unixNowMs(), Attached{8, BridgeEntry{"", "t", "r3", {""}, 1, {}, 0}}}));
  CHECK(first.closedByNode(5'000));
  CHECK(a.bridgesOf("m-raw").empty());
  CHECK(a.counter("opentunnel_mesh_link_errors_total{reason=\"sequence_gap\"}") == 1);

  // The node dials again and starts over: a hello and a snapshot of what it holds now.
  a.registry.attached("relay-a", localBridge("a2", "alpha"));
  RawPeer second(kToken, "m-raw");
  REQUIRE(second.accept(ot::mesh::testing::acceptWithin(rawListen, 5'000)));
  const auto hello = second.next();
  REQUIRE(hello);
  CHECK(std::holds_alternative<Hello>(hello->body));
  const auto snapshot = second.next();
  REQUIRE(snapshot);
  const auto& part = std::get<SnapshotPart>(snapshot->body);
  CHECK(part.sequence == 2);
  CHECK(bridgeIds(part.bridges) == std::vector<std::string>{"a1", "a2"});
  REQUIRE(second.send(helloFrame("m-raw", rawAddress)));
  REQUIRE(second.send(snapshotFrame(9, {"r9"})));
  REQUIRE(
      waitFor([&] { return bridgeIds(a.bridgesOf("m-raw")) == std::vector<std::string>{"r9"}; }));
  ::close(rawListen);
}

TEST_CASE("mesh node: of two links to one machine, both keep the one the lower address dialed") {
  // The node (.11) dials the peer (.13) at once; the peer's own dial arrives through relayd.
  uint16_t rawPort = 0;
  const int rawListen = ot::mesh::testing::listenTcp("127.0.0.13", rawPort);
  const std::string rawAddress = "127.0.0.13:" + std::to_string(rawPort);
  Machine a("m-a", "127.0.0.11", {rawAddress});
  a.start();
  // One link stays, and the node never tore down a link it had admitted.
  const auto oneLink = [&] {
    CHECK(a.status().linkedMachines == std::vector<std::string>{"m-raw"});
    CHECK(a.counter("opentunnel_mesh_links_total{event=\"down\"}") == 0);
  };

  SUBCASE("the peer's link first: the node's own dial replaces it") {
    RawPeer peerDialed(kToken, "m-raw");
    REQUIRE(peerDialed.dial("127.0.0.13", "127.0.0.11", a.relayd.port()));
    REQUIRE(peerDialed.send(helloFrame("m-raw", rawAddress)));
    REQUIRE(peerDialed.send(snapshotFrame(0, {"via-peer"})));
    REQUIRE(waitFor([&] { return a.bridgesOf("m-raw").size() == 1; }));

    RawPeer nodeDialed(kToken, "m-raw");
    REQUIRE(nodeDialed.accept(ot::mesh::testing::acceptWithin(rawListen, 5'000)));
    REQUIRE(nodeDialed.send(helloFrame("m-raw", rawAddress)));
    REQUIRE(nodeDialed.send(snapshotFrame(0, {"via-node"})));
    CHECK(peerDialed.closedByNode(5'000));
    REQUIRE(waitFor(
        [&] { return bridgeIds(a.bridgesOf("m-raw")) == std::vector<std::string>{"via-node"}; }));
    CHECK_FALSE(nodeDialed.closedByNode(300));
    oneLink();
  }
  SUBCASE("the node's link first: the peer's dial is the duplicate") {
    RawPeer nodeDialed(kToken, "m-raw");
    REQUIRE(nodeDialed.accept(ot::mesh::testing::acceptWithin(rawListen, 5'000)));
    REQUIRE(nodeDialed.send(helloFrame("m-raw", rawAddress)));
    REQUIRE(nodeDialed.send(snapshotFrame(0, {"via-node"})));
    REQUIRE(waitFor([&] { return a.bridgesOf("m-raw").size() == 1; }));

    RawPeer peerDialed(kToken, "m-raw");
    REQUIRE(peerDialed.dial("127.0.0.13", "127.0.0.11", a.relayd.port()));
    REQUIRE(peerDialed.send(helloFrame("m-raw", rawAddress)));
    REQUIRE(peerDialed.send(snapshotFrame(0, {"via-peer"})));
    CHECK(peerDialed.closedByNode(5'000));
    CHECK(bridgeIds(a.bridgesOf("m-raw")) == std::vector<std::string>{"via-node"});
    CHECK_FALSE(nodeDialed.closedByNode(300));
    oneLink();
  }
  ::close(rawListen);
}

TEST_CASE("mesh node: MESH_DNS finds the peers, at this machine's internal port") {
  // "localhost" answers 127.0.0.1: the peer listens there, at the port of A's INTERNAL_ADDRESS.
  Machine a("m-a", "127.0.0.11", {}, kToken, 100, 500, 0);
  Machine b("m-b", "127.0.0.1", {}, kToken, 100, 500, 0, a.relayd.port());
  REQUIRE(b.relayd.port() == a.relayd.port());
  a.settings.dnsName = "localhost";
  a.settings.dnsPort = a.relayd.port();
  a.settings.discoveryMs = 100;
  b.start();
  a.start();
  REQUIRE(waitFor([&] { return linkedTo(a, {"m-b"}) && linkedTo(b, {"m-a"}); }));
  const auto peers = a.status().peers;
  REQUIRE(peers.size() == 1);
  CHECK(peers.front().address == b.address());
  CHECK(peers.front().state == PeerState::kUp);
  CHECK(peers.front().machine == "m-b");
}

TEST_CASE("mesh node: a link that comes up is told with the tunnels that have a bridge here") {
  // Declared before the machines, so they outlive them: the nodes' threads may still call linkUp
  // (a duplicate link admitted late) until the machines stop at the end of the scope.
  std::mutex mutex;
  std::map<std::string, std::vector<std::vector<std::string>>> seen;  // on machine -> calls
  Machine a("m-a", "127.0.0.31", {}, kToken, 100, 500, 0);
  Machine b("m-b", "127.0.0.32", {}, kToken, 100, 500, 0);
  a.settings.peers = {*parseHostPort(b.address())};
  b.settings.peers = {*parseHostPort(a.address())};
  for (Machine* machine : {&a, &b}) {
    machine->linkUp = [&, self = machine->settings.machineId](const std::string& peer,
                                                              std::vector<std::string> tunnels) {
      const std::lock_guard lock(mutex);
      seen[self + "<-" + peer].push_back(std::move(tunnels));
    };
  }
  a.start();
  a.registry.replaceRelay("relay-a", {localBridge("a1", "beta"), localBridge("a2", "alpha"),
                                      localBridge("a3", "alpha", {"api"})});
  REQUIRE(waitFor([&] { return a.status().localBridges == 3; }));
  b.start();
  REQUIRE(waitFor([&] { return linkedTo(a, {"m-b"}) && linkedTo(b, {"m-a"}); }));
  REQUIRE(waitFor([&] {
    const std::lock_guard lock(mutex);
    return seen.size() == 2;
  }));
  const std::lock_guard lock(mutex);
  // Each side, for every link it admitted (both dial at once: one may be admitted, then replaced
  // by the pair's kept link), with its own tunnels, each named once.
  REQUIRE_FALSE(seen["m-a<-m-b"].empty());
  for (const auto& tunnels : seen["m-a<-m-b"]) {
    CHECK(tunnels == std::vector<std::string>{"alpha", "beta"});
  }
  REQUIRE_FALSE(seen["m-b<-m-a"].empty());
  for (const auto& tunnels : seen["m-b<-m-a"]) CHECK(tunnels.empty());
}

TEST_CASE("mesh node: a leaving machine shows draining in its own cluster view and its peer's") {
  Machine a("m-a", "127.0.0.11", {}, kToken, 100, 500, 0);
  Machine b("m-b", "127.0.0.12", {}, kToken, 100, 500, 0);
  a.settings.peers = {*parseHostPort(b.address())};
  b.settings.peers = {*parseHostPort(a.address())};
  a.start();
  b.start();
  REQUIRE(waitFor([&] { return linkedTo(a, {"m-b"}) && linkedTo(b, {"m-a"}); }));
  // The row of `machine` in `viewer`'s cluster view says draining.
  auto drainingIn = [](Machine& viewer, const std::string& machine) {
    const auto view = viewer.node->clusterView();
    if (!view) return false;
    for (const auto& row : view->machines) {
      if (row.summary.life.machineId == machine) return row.summary.life.draining;
    }
    return false;
  };
  CHECK_FALSE(drainingIn(a, "m-a"));
  CHECK_FALSE(drainingIn(b, "m-a"));
  a.node->setLeaving(true);
  CHECK(waitFor([&] { return drainingIn(a, "m-a") && drainingIn(b, "m-a"); }));
  CHECK_FALSE(drainingIn(a, "m-b"));
  a.node->setLeaving(false);
  CHECK(waitFor([&] { return !drainingIn(a, "m-a"); }));
}

TEST_CASE("mesh node: relayd's first table waits for every peer's link and snapshot") {
  uint16_t firstPort = 0;
  uint16_t secondPort = 0;
  const int firstListen = ot::mesh::testing::listenTcp("127.0.0.12", firstPort);
  const int secondListen = ot::mesh::testing::listenTcp("127.0.0.13", secondPort);
  const std::string firstAddress = "127.0.0.12:" + std::to_string(firstPort);
  const std::string secondAddress = "127.0.0.13:" + std::to_string(secondPort);
  // Pings every 100 ms: the node's tick (a quarter of that) checks whether the links settled.
  Machine a("m-a", "127.0.0.11", {firstAddress, secondAddress}, kToken, 100, 30'000);
  std::mutex mutex;
  std::vector<FeedSnapshot> served;
  a.feedSink.delta = [](const FeedDelta&) {};
  a.feedSink.snapshot = [&](const std::string&, const FeedSnapshot& snapshot) {
    std::lock_guard lock(mutex);
    served.push_back(snapshot);
  };
  a.start();
  a.node->routeFeed().requestSnapshot("relay-1");  // relayd's session asks at once

  RawPeer first(kToken, "m-1");
  REQUIRE(first.accept(ot::mesh::testing::acceptWithin(firstListen, 5'000)));
  REQUIRE(first.send(helloFrame("m-1", firstAddress)));
  REQUIRE(first.send(snapshotFrame(0, {"f1"})));
  RawPeer second(kToken, "m-2");
  REQUIRE(second.accept(ot::mesh::testing::acceptWithin(secondListen, 5'000)));
  REQUIRE(second.send(helloFrame("m-2", secondAddress)));
  // Both links are up; the second peer's snapshot has not been sent. A table served now would
  // lack m-2, and relayd would refuse its forwards until the next update.
  REQUIRE(waitFor([&] { return linkedTo(a, {"m-1", "m-2"}); }));
  REQUIRE(waitFor([&] { return a.bridgesOf("m-1").size() == 1; }));
  // Nothing may be served while m-2's snapshot is missing: a dozen of the node's ticks go by.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  {
    std::lock_guard lock(mutex);
    CHECK(served.empty());
  }
  REQUIRE(second.send(snapshotFrame(0, {"s1"})));
  REQUIRE(waitFor([&] {
    std::lock_guard lock(mutex);
    return !served.empty();
  }));
  std::lock_guard lock(mutex);
  REQUIRE(served.size() == 1);
  const std::vector<FeedPeer> expected{{"m-1", firstAddress, true}, {"m-2", secondAddress, true}};
  CHECK(served.front().peers == expected);
  CHECK(served.front().holders.size() == 2);
  ::close(firstListen);
  ::close(secondListen);
}
