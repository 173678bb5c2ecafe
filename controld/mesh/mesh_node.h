// controld's mesh node (docs/mesh.md "How it is wired"): its own libuv loop thread, started
// by ControldServer when INTERNAL_LISTEN is set. It takes the mesh links relayd hands over on
// MESH_HANDOFF_SOCKET, dials every peer address (MESH_PEERS, MESH_DNS) from INTERNAL_ADDRESS's IP,
// proves INTERNAL_TOKEN on each link, keeps one link per machine, sends this machine's hello, a
// snapshot of its bridges and then numbered deltas (learned from the BridgeRegistry it observes),
// pings idle links, and applies what each peer announces to the bridge table. A link that closes,
// goes silent for MESH_DEAD_MS, breaks a rule, or falls 200,000 frames behind ends, and its
// machine's entries are held while its relayd answers the liveness question (AliveAsker,
// docs/mesh.md "A controld restart drops no tunnel") and dropped once it does not. A new life
// neither dials nor takes links until its relayd's session snapshot reached it (or
// relayWaitMs passed without one), so its first snapshot carries its bridges.
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
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/address_resolver.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/nonce_window.h"
#include "common/result.h"
#include "controld/mesh/alive_asker.h"
#include "controld/mesh/bridge_table.h"
#include "controld/mesh/cluster_view.h"
#include "controld/mesh/handoff_listener.h"
#include "controld/mesh/internal_exchange.h"
#include "controld/mesh/link_gate.h"
#include "controld/mesh/local_bridges.h"
#include "controld/mesh/mesh_discovery.h"
#include "controld/mesh/mesh_link.h"
#include "controld/mesh/mesh_metrics.h"
#include "controld/mesh/mesh_settings.h"
#include "controld/mesh/peer_directory.h"
#include "controld/mesh/route_feed_pump.h"
#include "controld/relays/bridge_registry.h"

namespace ot::mesh {

// A route check's finding (docs/mesh.md "Route checks"): another live machine answered that its
// own bridges of the tunnel claim `route` now.
struct RouteConflict {
  std::string machineId;
  std::string route;
};

// A copy of the node's state, for the admin view and the tests.
// One machine in announceReset's answer.
struct PeerReset {
  std::string machine;
  bool told = false;   // a proven link carried tunnel_reset to it
  size_t bridges = 0;  // the tunnel's bridges there, by the table, when the event left
};

struct MeshNodeStatus {
  std::vector<PeerView> peers;
  std::vector<std::string> linkedMachines;  // one link each, sorted
  std::vector<std::string> heldMachines;    // link ended, entries held while their relayd answers
  bool linking = false;                     // this life's first relayd snapshot came (or the wait)
  size_t openLinks = 0;                     // every connection, handshakes included
  std::vector<MachineSummary> machines;     // the table's
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

  // Route checks (mesh_node_routes.cc). The answering side reads this machine's bridges as the
  // node announces them (LocalBridges: authorized ones included, as peers' tables have them).
  // Asks every linked machine whose table entries hold any of `routes` of the tunnel whether its
  // live bridges claim them now; `done` (on the loop) gets the first conflict found, or nullopt
  // when no linked machine holds them, none answers that it does, or none can be asked in
  // kRouteCheckTimeoutMs. Any thread.
  void checkRoutes(std::string tunnelId, std::vector<std::string> routes,
                   std::function<void(std::optional<RouteConflict>)> done);
  // checkRoutes, waited for: from any thread but the loop's (an attach's authorization). Answers
  // at once when the table names no other holder (the common case: no wait at all).
  [[nodiscard]] std::optional<RouteConflict> findRouteConflict(
      const std::string& tunnelId, const std::vector<std::string>& routes);

  // Events (mesh_node_events.cc, docs/mesh.md "Events"). broadcast(): any thread; the event goes
  // to every proven link. setPeerEvents(): before start(); called on the loop with each event a
  // peer sends (tunnel created, certificate changed, tunnel deleted, job enqueued).
  void broadcast(FrameBody event);
  // setLeaving(true): this machine is draining (its relayd said so): `leaving` goes to every
  // linked peer once, and every later hello says draining. setLeaving(false) after that (a relayd
  // serving again under the same controld): every link is closed, so peers redial and take the
  // new hello and snapshot. Any thread; repeats change nothing.
  void setLeaving(bool leaving);
  // A tunnel reset (docs/pools-reset.md): tunnel_reset goes to every proven link, and the answer
  // says, per machine, whether it was told and how many of the tunnel's bridges the table shows
  // there (machines with such bridges but no link are listed untold: they miss the event). Waits
  // for the loop: from any thread but the loop's; empty when the loop is not running.
  [[nodiscard]] std::vector<PeerReset> announceReset(const std::string& tunnelId);
  void setPeerEvents(std::function<void(const FrameBody&)> handler) {
    peerEvents_ = std::move(handler);
  }
  // Before start(): called on the loop each time a link to a machine comes up (its hello
  // admitted), with the tunnels that have a bridge on this machine now. Events the machine sent
  // while it was not linked are lost; the handler makes up for them (PeerEventApplier::linkUp).
  using LinkUpHandler =
      std::function<void(const std::string& machine, std::vector<std::string> localTunnels)>;
  void setLinkUp(LinkUpHandler handler) { linkUp_ = std::move(handler); }

  // This life of the machine (the hello's epoch and started_at).
  [[nodiscard]] uint64_t epoch() const { return epoch_; }
  [[nodiscard]] int64_t startedAtMs() const { return startedAtMs_; }
  // Waits for the loop (empty when it is not running).
  [[nodiscard]] MeshNodeStatus status();
  // The admin stats' cluster view, built on the loop (mesh_node_view.cc); nullopt when the loop
  // is not running.
  [[nodiscard]] std::optional<ClusterView> clusterView();
  // The bridges the table holds on linked machines for any of `tunnelIds` (the Admin service's
  // bridges and online filter; mesh_node_admin.cc), built on the loop; empty when it is not
  // running.
  [[nodiscard]] std::vector<BridgeEntry> peerBridgesOf(const std::vector<std::string>& tunnelIds);
  // relayd's copy of the table (route_feed_pump.h): set its sink before start().
  [[nodiscard]] RouteFeedPump& routeFeed() { return routeFeed_; }

  // BridgeRegistryObserver: queued to the loop, announced there in order.
  void relayReplaced(const std::string& relayKey,
                     const std::vector<controld::BridgeEntry>& bridges) override;
  void bridgeAttached(const std::string& relayKey, const controld::BridgeEntry& bridge) override;
  void bridgeDetached(const std::string& relayKey, const std::string& bridgeId) override;
  void relayDropped(const std::string& relayKey) override;
  void bridgeAuthorized(const std::string& relayKey, const controld::BridgeEntry& bridge) override;

 private:
  void post(std::function<void()> task);
  void runTasks();
  void shutdownOnLoop();
  void tick();
  void startDial(const std::string& address);
  void dialResolved(const std::string& address, const sockaddr_storage& target);
  void acceptHandoff(ReceivedHandoff received);
  void applyLocal(const LocalChange& change);
  void announce(std::vector<FrameBody> bodies);
  void sendHelloAndSnapshot(MeshLink& link);
  void onHello(MeshLink& link, const Hello& hello);
  void applyTable(MeshLink& link, Frame& frame);
  void answerRouteCheck(ReceivedHandoff received);  // mesh_node_routes.cc
  [[nodiscard]] std::string routeCheckAnswer(const std::string& bytes, const std::string& peerHost);
  void countRouteCheck(std::string_view side, std::string_view result);
  [[nodiscard]] static std::map<std::string, prometheus::Counter*, std::less<>> routeCheckCounters(
      metrics::Metrics& metrics);
  // docs/mesh.md "A controld restart drops no tunnel": the machine's active link ended. A lost
  // link's entries are held and the machine's relayd asked; a draining machine's, or those of a
  // link ended for a broken rule, go at once.
  void peerLinkEnded(const MeshLink& link, int64_t nowMs);
  void dropPeer(const std::string& machine, std::string_view reason);
  // Opens the link gate when due (LinkGate) and takes up the links it kept.
  void updateGate(bool relaySnapshot);
  // Releases relayd's table snapshots once the links are settled (mesh_node.cc).
  void updateSettled();
  static constexpr int64_t kSettleMs = 5'000;
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
  std::unique_ptr<AliveAsker> alive_;
  std::optional<LinkGate> gate_;  // set by start()
  PeerDirectory directory_;
  LocalBridges local_;
  BridgeTable table_;
  RouteFeedPump routeFeed_{table_};  // observes table_; link ups and downs told below
  std::unordered_map<MeshLink*, std::unique_ptr<MeshLink>> links_;
  std::map<std::string, MeshLink*> active_;             // machine -> its link
  std::unordered_map<MeshLink*, std::string> dialing_;  // outbound link -> the peer address dialed
  std::map<uint64_t, DnsQuery*> dialQueries_;           // MESH_PEERS names being resolved
  uint64_t nextQueryId_ = 0;

  // Route checks (mesh_node_routes.cc): both sides' connections, the answering side's replay
  // window.
  std::unique_ptr<InternalExchanges> exchanges_;
  NonceWindow routeCheckNonces_;
  std::function<void(const FrameBody&)> peerEvents_;
  LinkUpHandler linkUp_;
  bool leaving_ = false;  // loop thread
  bool settled_ = false;  // loop thread: relayd's table snapshots released
  int64_t gateOpenedAtMs_ = 0;
  std::map<std::string, prometheus::Counter*, std::less<>> routeCheckCounters_;
};

}  // namespace ot::mesh
