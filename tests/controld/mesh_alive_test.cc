// The mesh node's side of "A controld restart drops no tunnel" (docs/mesh.md) over real sockets on
// 127.0.0.x: a peer whose link closes is held while its relayd (here a thread answering the real
// signed liveness question on the peer's internal address) says it serves, and its next life's
// snapshot replaces the held entries with no drop in between; a new life does not link before its
// relayd's session snapshot reached it.
#include <doctest/doctest.h>
#include <poll.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/alive_probe.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "controld/mesh/mesh_node.h"
#include "controld/relays/bridge_registry.h"
#include "tests/controld/mesh_test_peer.h"

using namespace ot::mesh;
using ot::mesh::testing::FakeRelayd;
using ot::mesh::testing::RawPeer;
using ot::mesh::testing::waitFor;

namespace {

const std::string kToken = "0123456789abcdef0123456789abcdef-mesh-alive-test-token";

std::string tempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "ot-alive-XXXXXX").string();
  return ::mkdtemp(pattern.data());
}

struct Machine {
  Machine(const std::string& id, const std::string& ip, std::vector<std::string> peers)
      : relayd(ip, 0), dir(tempDir()) {
    settings.machineId = id;
    settings.region = "test";
    settings.token = kToken;
    settings.internalAddress = HostPort{ip, relayd.port()};
    for (const auto& peer : peers) settings.peers.push_back(*parseHostPort(peer));
    // Asked every 100 ms; a dead time long enough that a loaded test box does not miss it.
    settings.pingMs = 100;
    settings.deadMs = 2'000;
    settings.holdMs = 10'000;
    settings.higherAddressDelayMs = 0;
    settings.handoffSocket = dir + "/mesh-handoff.sock";
  }
  ~Machine() {
    registry.setObserver(nullptr);
    if (node) node->stop();
    relayd.stop();
    std::filesystem::remove_all(dir);
  }
  void start() {
    node = std::make_unique<MeshNode>(settings, metrics);
    REQUIRE(node->start().ok());
    REQUIRE(relayd.serve(settings.handoffSocket));
    registry.setObserver(node.get());
  }
  [[nodiscard]] std::vector<BridgeEntry> bridgesOf(const std::string& machine) const {
    auto s = node->status();
    auto found = s.bridges.find(machine);
    return found == s.bridges.end() ? std::vector<BridgeEntry>{} : found->second;
  }
  [[nodiscard]] double counter(const std::string& line) const {
    // At a line's start: a metric without labels is also named in its # HELP and # TYPE lines.
    const std::string text = "\n" + metrics.render();
    const size_t at = text.find("\n" + line + " ");
    return at == std::string::npos ? -1 : std::stod(text.substr(at + line.size() + 2));
  }

  FakeRelayd relayd;
  std::string dir;
  MeshSettings settings;
  ot::metrics::Metrics metrics;
  ot::controld::BridgeRegistry registry;
  std::unique_ptr<MeshNode> node;
};

// A peer machine's relayd as far as the liveness question goes: on its internal address, it
// verifies each question and answers with `state`, or (answering false) closes without a word.
class AliveAnswerer {
 public:
  AliveAnswerer(std::string machineId, const std::string& ip) : machineId_(std::move(machineId)) {
    listenFd_ = ot::mesh::testing::listenTcp(ip, port_);
    thread_ = std::thread([this] { run(); });
  }
  ~AliveAnswerer() {
    stop_ = true;
    thread_.join();
    ::close(listenFd_);
  }
  [[nodiscard]] uint16_t port() const { return port_; }
  std::atomic<AliveState> state{AliveState::kServing};
  std::atomic<bool> answering{true};
  std::atomic<int> answered{0};

 private:
  void run() {
    while (!stop_) {
      const int fd = ot::mesh::testing::acceptWithin(listenFd_, 20);
      if (fd < 0) continue;
      std::string line;
      char c = 0;
      while (ot::mesh::testing::readable(fd, 1'000) && ::read(fd, &c, 1) == 1 && c != '\n') {
        line.push_back(c);
      }
      const int64_t now = ot::unixNowMs();
      auto question = verifyAliveQuestion(line, kToken, machineId_, now);
      if (question && answering) {
        const std::string answer = buildAliveAnswer(kToken, *question, state, now);
        (void)::write(fd, answer.data(), answer.size());
        ++answered;
      }
      ::close(fd);
    }
  }

  std::string machineId_;
  uint16_t port_ = 0;
  int listenFd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

Frame helloFrame(const std::string& machine, const std::string& address, uint64_t epoch,
                 int64_t startedAtMs) {
  return Frame{ot::unixNowMs(),
               Hello{kLinkFormatVersion, machine, "test", address, epoch, startedAtMs, false}};
}

Frame snapshotFrame(uint64_t sequence, const std::vector<std::string>& ids) {
  SnapshotPart part;
  part.sequence = sequence;
  for (const auto& id : ids) {
    part.bridges.push_back(BridgeEntry{"", "tunnel" + id, id, {""}, ot::unixNowMs(), {}, 0});
  }
  return Frame{ot::unixNowMs(), std::move(part)};
}

}  // namespace

TEST_CASE(
    "mesh alive: a closed link's entries are held while its relayd serves, then replaced by "
    "the next life without a drop") {
  AliveAnswerer raw("m-raw", "127.0.0.13");
  const std::string rawAddress = "127.0.0.13:" + std::to_string(raw.port());
  Machine b("m-b", "127.0.0.12", {});
  b.settings.relayWaitMs = 0;
  b.start();

  RawPeer oldLife(kToken, "m-raw");
  REQUIRE(oldLife.dial("127.0.0.13", "127.0.0.12", b.relayd.port()));
  REQUIRE(oldLife.send(helloFrame("m-raw", rawAddress, 7, 1'000)));
  REQUIRE(oldLife.send(snapshotFrame(3, {"r1", "r2"})));
  REQUIRE(waitFor([&] { return b.bridgesOf("m-raw").size() == 2; }));

  oldLife.closeSocket();  // its controld was killed; its relayd answers `serving`
  REQUIRE(
      waitFor([&] { return b.node->status().heldMachines == std::vector<std::string>{"m-raw"}; }));
  // Held past the dead time (2 s): 25 good answers, a question every 100 ms.
  REQUIRE(waitFor(
      [&] { return b.counter("opentunnel_mesh_alive_checks_total{result=\"serving\"}") >= 25; }));
  CHECK(b.bridgesOf("m-raw").size() == 2);
  const auto status = b.node->status();
  CHECK(status.linkedMachines.empty());
  CHECK(b.counter("opentunnel_mesh_held_machines") == 1);
  raw.state = AliveState::kControlDown;
  REQUIRE(waitFor([&] {
    return b.counter("opentunnel_mesh_alive_checks_total{result=\"control_down\"}") >= 3;
  }));
  CHECK(b.bridgesOf("m-raw").size() == 2);

  // The next life links: its snapshot replaces the held entries, the hold ends, nothing dropped.
  RawPeer newLife(kToken, "m-raw");
  REQUIRE(newLife.dial("127.0.0.13", "127.0.0.12", b.relayd.port()));
  REQUIRE(newLife.send(helloFrame("m-raw", rawAddress, 9, 2'000)));
  REQUIRE(newLife.send(snapshotFrame(0, {"r1", "r2", "r3"})));
  REQUIRE(waitFor([&] { return b.bridgesOf("m-raw").size() == 3; }));
  CHECK(b.node->status().heldMachines.empty());
  CHECK(b.counter("opentunnel_mesh_held_machines") == 0);
  for (const char* reason : {"timeout", "refused", "closed", "hold_expired", "draining"}) {
    CAPTURE(reason);
    CHECK(b.counter(std::string("opentunnel_mesh_machines_dropped_total{reason=\"") + reason +
                    "\"}") == 0);
  }
}

TEST_CASE("mesh alive: a held machine whose relayd says draining, or stops answering, is dropped") {
  AliveAnswerer raw("m-raw", "127.0.0.13");
  const std::string rawAddress = "127.0.0.13:" + std::to_string(raw.port());
  Machine b("m-b", "127.0.0.12", {});
  b.settings.relayWaitMs = 0;
  b.start();

  SUBCASE("draining") {
    raw.state = AliveState::kDraining;
  }
  SUBCASE("a closed connection without an answer") {
    raw.answering = false;
  }
  RawPeer peer(kToken, "m-raw");
  REQUIRE(peer.dial("127.0.0.13", "127.0.0.12", b.relayd.port()));
  REQUIRE(peer.send(helloFrame("m-raw", rawAddress, 7, 1'000)));
  REQUIRE(peer.send(snapshotFrame(0, {"r1"})));
  REQUIRE(waitFor([&] { return b.bridgesOf("m-raw").size() == 1; }));
  const auto closedAt = std::chrono::steady_clock::now();
  peer.closeSocket();
  REQUIRE(waitFor([&] { return b.bridgesOf("m-raw").empty(); }));
  // At the first answer, not after the dead time (2 s).
  CHECK(std::chrono::steady_clock::now() - closedAt < std::chrono::milliseconds(1'500));
  CHECK(b.node->status().heldMachines.empty());
  const double dropped = b.counter("opentunnel_mesh_machines_dropped_total{reason=\"draining\"}") +
                         b.counter("opentunnel_mesh_machines_dropped_total{reason=\"closed\"}");
  CHECK(dropped == 1);
}

TEST_CASE("mesh alive: a new life takes no link before its relayd's session snapshot") {
  Machine a("m-a", "127.0.0.11", {});
  Machine b("m-b", "127.0.0.12", {});  // A's port is known once A runs
  a.settings.relayWaitMs = 60'000;     // only the relayd snapshot can open it here
  a.start();
  b.settings.peers = {HostPort{"127.0.0.11", a.relayd.port()}};
  b.settings.relayWaitMs = 0;
  b.start();

  // B dials A; A keeps the handed-over link without answering it.
  REQUIRE(waitFor([&] { return a.counter("opentunnel_mesh_links_deferred_total") >= 1; }));
  CHECK_FALSE(a.node->status().linking);
  CHECK(a.node->status().linkedMachines.empty());

  ot::controld::BridgeEntry bridge;
  bridge.bridgeId = "a1";
  bridge.tunnelId = "alpha";
  bridge.routes = {""};
  bridge.attachedAtMs = ot::unixNowMs();
  a.registry.replaceRelay("relay-a", {bridge});  // relayd's session snapshot

  REQUIRE(waitFor([&] { return b.bridgesOf("m-a").size() == 1; }));
  CHECK(a.node->status().linking);
  CHECK(b.node->status().linkedMachines == std::vector<std::string>{"m-a"});
  // B's first snapshot from A already carried the bridge: one snapshot, one bridge in it.
  CHECK(b.counter("opentunnel_mesh_snapshot_bridges_count") == 1);
  CHECK(b.counter("opentunnel_mesh_snapshot_bridges_sum") == 1);
}

TEST_CASE("mesh alive: a bridge is announced at authorization, and relayd's report adds nothing") {
  Machine a("m-a", "127.0.0.11", {});
  Machine b("m-b", "127.0.0.12", {});
  a.settings.relayWaitMs = 0;
  a.start();
  b.settings.peers = {HostPort{"127.0.0.11", a.relayd.port()}};
  b.settings.relayWaitMs = 0;
  b.start();
  REQUIRE(
      waitFor([&] { return b.node->status().linkedMachines == std::vector<std::string>{"m-a"}; }));

  ot::controld::BridgeEntry bridge;
  bridge.bridgeId = "a1";
  bridge.tunnelId = "alpha";
  bridge.routes = {"", "api"};
  bridge.attachedAtMs = ot::unixNowMs();
  a.registry.authorized("relay-a", bridge);  // controld allowed it; relayd has not answered yet
  REQUIRE(waitFor([&] { return b.bridgesOf("m-a").size() == 1; }));
  CHECK(a.node->status().sequence == 1);

  bridge.attachedAtMs += 5;  // relayd's own attach time
  a.registry.attached("relay-a", bridge);
  // status() is queued behind the report on the node's loop, so it sees it applied.
  CHECK(a.node->status().sequence == 1);  // the report announced nothing
  CHECK(b.counter("opentunnel_mesh_frames_total{direction=\"in\",type=\"attached\"}") == 1);

  // Its attach failed after all: relayd reports it detached.
  a.registry.detached("relay-a", "a1");
  REQUIRE(waitFor([&] { return b.bridgesOf("m-a").empty(); }));
  CHECK(a.node->status().sequence == 2);
}
