// controld's mesh node (docs/mesh.md "How it is wired", step 2): its own libuv loop thread, started
// by ControldServer when INTERNAL_LISTEN is set. It takes the mesh links relayd hands over on
// MESH_HANDOFF_SOCKET, dials every peer address (MESH_PEERS, MESH_DNS) from INTERNAL_ADDRESS's IP,
// proves INTERNAL_TOKEN on each link, keeps one link per machine, sends this machine's hello, a
// snapshot of its bridges and then numbered deltas (learned from the BridgeRegistry it observes),
// pings idle links, and applies what each peer announces to the bridge table. A link that closes,
// goes silent for MESH_DEAD_MS, breaks a rule, or falls 200,000 frames behind ends, and its
// machine's entries go with it (the "suspect" seam of a controld restart is peerLinkEnded()).
//
// Threads: start() and stop() from the owner's thread; the observer calls from any thread (they
// queue the change and wake the loop); status() from any thread but the loop's (it waits for it).
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/address_resolver.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/result.h"
#include "controld/mesh/bridge_table.h"
#include "controld/mesh/handoff_listener.h"
#include "controld/mesh/local_bridges.h"
#include "controld/mesh/mesh_discovery.h"
#include "controld/mesh/mesh_link.h"
#include "controld/mesh/mesh_metrics.h"
#include "controld/mesh/mesh_settings.h"
#include "controld/mesh/peer_directory.h"
#include "controld/mesh/route_feed_pump.h"
#include "controld/relays/bridge_registry.h"

namespace ot::mesh {

// A copy of the node's state, for the admin view and the tests.
struct MeshNodeStatus {
  std::vector<PeerView> peers;
  std::vector<std::string> linkedMachines;                  // one link each, sorted
  size_t openLinks = 0;                                     // every connection, handshakes included
  std::vector<MachineSummary> machines;                     // the table's
  std::map<std::string, std::vector<BridgeEntry>> bridges;  // the table's, by machine
  uint64_t sequence = 0;                                    // this machine's last delta
  size_t localBridges = 0;
};

class MeshNode final : public controld::BridgeRegistryObserver, public LinkOwner {
 public:
  MeshNode(MeshSettings settings, metrics::Metrics& metrics);
  ~MeshNode() override;
  MeshNode(const MeshNode&) = delete;
  MeshNode& operator=(const MeshNode&) = delete;

  // Listens on MESH_HANDOFF_SOCKET and starts the loop thread. An error leaves nothing running.
  [[nodiscard]] Status start();
  // Closes every link and the handoff socket, ends the thread. Idempotent.
  void stop();

  // This life of the machine (the hello's epoch and started_at).
  [[nodiscard]] uint64_t epoch() const { return epoch_; }
  [[nodiscard]] int64_t startedAtMs() const { return startedAtMs_; }
  // Waits for the loop (empty when it is not running).
  [[nodiscard]] MeshNodeStatus status();
  // relayd's copy of the table (route_feed_pump.h): set its sink before start().
  [[nodiscard]] RouteFeedPump& routeFeed() { return routeFeed_; }

  // BridgeRegistryObserver: queued to the loop, announced there in order.
  void relayReplaced(const std::string& relayKey,
                     const std::vector<controld::BridgeEntry>& bridges) override;
  void bridgeAttached(const std::string& relayKey, const controld::BridgeEntry& bridge) override;
  void bridgeDetached(const std::string& relayKey, const std::string& bridgeId) override;
  void relayDropped(const std::string& relayKey) override;

 private:
  void post(std::function<void()> task);
  void runTasks();
  void shutdownOnLoop();
  void tick();
  void startDial(const std::string& address);
  void dialResolved(const std::string& address, const sockaddr_storage& target);
  void acceptHandoff(ReceivedHandoff received);
  void applyLocal(const LocalChange& change);
  void sendHelloAndSnapshot(MeshLink& link);
  void onHello(MeshLink& link, const Hello& hello);
  void applyTable(MeshLink& link, Frame& frame);
  // The seam of docs/mesh.md "A controld restart drops no tunnel": the link to `machine` ended.
  // Today its entries go at once (the reference's behaviour); the liveness question to its relayd
  // belongs here once relayd answers it.
  void peerLinkEnded(const std::string& machine);
  [[nodiscard]] std::string peerKey(const MeshLink& link) const;
  void refuse(MeshLink& link, std::string_view reason);
  void updateGauges();

  void linkProven(MeshLink& link) override;
  void linkFrame(MeshLink& link, Frame frame) override;
  void linkClosed(MeshLink& link) override;

  MeshSettings settings_;
  std::string selfAddress_;  // canonical INTERNAL_ADDRESS
  MeshMetrics metrics_;
  log::Logger log_{"controld.mesh"};
  uint64_t epoch_;
  int64_t startedAtMs_;
  std::mt19937_64 random_;

  uv_loop_t loop_{};
  uv_async_t wake_{};
  uv_timer_t tickTimer_{};
  std::thread thread_;
  bool started_ = false;
  bool stopping_ = false;  // loop thread

  std::mutex tasksMutex_;
  std::vector<std::function<void()>> tasks_;
  bool accepting_ = false;  // under tasksMutex_

  std::unique_ptr<HandoffListener> handoffs_;
  std::unique_ptr<MeshDiscovery> discovery_;  // MESH_DNS set
  PeerDirectory directory_;
  LocalBridges local_;
  BridgeTable table_;
  RouteFeedPump routeFeed_{table_};  // observes table_; link ups and downs told below
  std::unordered_map<MeshLink*, std::unique_ptr<MeshLink>> links_;
  std::map<std::string, MeshLink*> active_;             // machine -> its link
  std::unordered_map<MeshLink*, std::string> dialing_;  // outbound link -> the peer address dialed
  std::map<uint64_t, DnsQuery*> dialQueries_;           // MESH_PEERS names being resolved
  uint64_t nextQueryId_ = 0;
};

}  // namespace ot::mesh
