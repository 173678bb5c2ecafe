// The relay's state on its loop: the tunnel table, the bridges by key, the control client, the
// API-domain TLS context, the API proxy, and the decisions that need all of them (routing a
// visitor, allowing an upgrade, authorizing an attach, applying controld's pushes, draining).
// Bridges see it as a RelayForBridge (relayd/relay_for_bridge.h). relay.cc holds attaches,
// bridges, visitors and the drain; relay_control.cc applies controld's pushes and commands.
// Loop thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/bridge_control.h"
#include "common/tls_engine.h"
#include "relayd/api_proxy.h"
#include "relayd/attach_guard.h"
#include "relayd/control_client.h"
#include "relayd/direct_dialer.h"
#include "relayd/forwarded_visitor.h"
#include "relayd/mesh_feed_receiver.h"
#include "relayd/mesh_forwarder.h"
#include "relayd/mesh_route_table.h"
#include "relayd/relay_context.h"
#include "relayd/relay_for_bridge.h"
#include "relayd/relay_health.h"
#include "relayd/sni_route.h"
#include "relayd/status_store.h"
#include "relayd/tunnel_table.h"

namespace ot::relayd {

class BridgeSession;

class Relay final : public RelayForBridge, public ForwardedVisitorRouter {
 public:
  Relay(RelayContext& context, ControlClientOptions controlOptions);
  ~Relay();
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;

  void start();

  // --- API domain
  [[nodiscard]] tls::SslCtxPtr apiContext() const { return apiContext_; }
  [[nodiscard]] ApiProxy& apiProxy() { return apiProxy_; }
  [[nodiscard]] bool controlConnected() const { return control_->connected(); }
  // What GET /health says now (relay_health.h).
  [[nodiscard]] HealthReport health() const {
    return health_.report(context_.draining, context_.nowMs());
  }

  // kDraining: this relay is shutting down; the client should come back soon (503, Retry-After).
  enum class UpgradeDecision : uint8_t { kAllowed, kNotFound, kUnavailable, kDraining };
  // Whether GET /api/tunnel/<id>/bridge may be upgraded: the tunnel exists (cache, else
  // FetchTunnel). `done` may run synchronously. Upgrades of one tunnel that come while its record
  // is being fetched wait for that fetch instead of starting their own.
  void checkUpgrade(const std::string& tunnelId, std::function<void(UpgradeDecision)> done);

  // --- bridges (RelayForBridge)
  uint64_t registerBridge(BridgeSession* bridge) override;
  void unregisterBridge(uint64_t key) override;
  [[nodiscard]] std::string newBridgeId(uint64_t key) const override;
  void authorizeAttach(BridgeSession* bridge) override;
  void attachFailed(const BridgeSession& bridge) override;
  void bridgeAttached(BridgeSession* bridge) override;
  void bridgeDetached(BridgeSession* bridge, DetachOutcome reason) override;
  void bridgeDraining(const std::string& tunnelId, uint64_t bridgeKey) override {
    table_.setDraining(tunnelId, bridgeKey);
  }
  void streamClosed(const std::string& tunnelId, uint64_t bridgeKey, const std::string& origin,
                    uint64_t bytesIn, uint64_t bytesOut) override;
  void bridgeStatus(BridgeSession* bridge, std::string_view text) override;

  // --- visitors
  // A visitor whose ClientHello named a tunnel: pick a bridge and splice, or close and count.
  // With no bridge here for its route, a visitor goes to the machine the mesh's route table names
  // (mesh_forwarder.h), when INTERNAL_ADDRESS is set and the table names one.
  void routeVisitor(TcpStream* stream, const SniTarget& target, std::vector<uint8_t> hello);
  // A visitor another machine forwarded here (forwarded_visitor.h): routed like a local one,
  // never forwarded again.
  ForwardedRoute routeForwarded(TcpStream* stream, const SniTarget& target,
                                std::vector<uint8_t> hello, const std::function<bool()>& accept,
                                std::string_view origin) override;
  // Where the mesh's routes are held, as the Relay's owner last set it (empty: no forwarding).
  [[nodiscard]] MeshRouteTable& meshRoutes() { return meshRoutes_; }
  [[nodiscard]] MeshForwarder* meshForwarder() { return forwarder_.get(); }

  // --- shutdown
  // SIGTERM: tell controld, drain every bridge (spread over up to 5 s).
  void startDrain();
  // An operator's drain (DrainRelay undo) ends: attaches are taken and /health serves again. The
  // bridges already drained stay closed; their clients come back on their own.
  void stopDrain();
  // At the end of the drain period: close every bridge that is left with 1012.
  void closeAllBridges();
  void stop();  // stops the control client

  // controld's API-domain certificate: the TLS context bridges and API requests get. Public for
  // tests.
  void onApiCertificate(const v1::ApiCertificate& certificate);
  // Caches a pushed or fetched record; a newer one closes at once the bridges whose derived
  // credential it no longer lists (1008 "credential revoked"). Public for tests.
  void storeRecord(const v1::TunnelRecord& record);
  // Command reset_tunnel (the owner's or an operator's reset): closes the tunnel's bridges with
  // 4000 "reset" and drops its cached record. Returns the bridges closed. Public for tests.
  size_t resetTunnel(const std::string& tunnelId);

  // Direct mode (direct_dialer.h): the dialer of this relay, and the end of one of its dialed
  // connections (InboundConnection, ApiConnection report it).
  [[nodiscard]] DirectDialer& directDialer() { return *direct_; }
  void directDialEnded(uint64_t dialId) { direct_->dialEnded(dialId); }

  [[nodiscard]] TunnelTable& table() { return table_; }
  [[nodiscard]] size_t bridgeCount() const { return bridges_.size(); }

 private:
  void onTunnel(const v1::TunnelRecord& record);
  void onTunnelDeleted(const std::string& tunnelId);
  void onCommand(const v1::Command& command);
  // The mesh table feed into meshRoutes_ (relay_control.cc).
  void meshFeedEvents(ControlEvents& events);
  void onMeshSnapshot(const v1::MeshTableSnapshot& part);
  void onMeshDelta(const v1::MeshTableDelta& delta);
  // The cached-record rules (relay.cc, docs/mesh.md "Cached records"): a mesh link came up, the
  // periodic sweep, and a record read again in the background.
  void onRecheckRecords(const v1::RecheckRecords& recheck);
  void sweepCache();
  void rereadRecord(const std::string& tunnelId);
  static constexpr uint64_t kCacheSweepMs = 5'000;
  void closeTunnelBridges(const std::string& tunnelId, uint16_t code, DetachOutcome reason,
                          const std::string& text = {});
  void authorizeFromCache(uint64_t key);
  void finishAttach(uint64_t key, const v1::AuthorizeAttachResponse* response);
  // A FetchTunnel's answer for checkUpgrade, cached in table_ as it says.
  UpgradeDecision fetchedDecision(const std::string& tunnelId, uint64_t generation,
                                  const Result<v1::FetchTunnelResponse>& result);
  void rejectVisitor(TcpStream* stream, VisitorOutcome outcome, const std::string& tunnelId);
  // `forwardedAccept`: set for a forwarded visitor (its `1` answer), which is never forwarded.
  ForwardedRoute route(TcpStream* stream, const SniTarget& target, std::vector<uint8_t> hello,
                       const std::function<bool()>* forwardedAccept,
                       std::string_view forwardedOrigin = {});
  void drainStep();
  static void onDrainTimer(uv_timer_t* handle);

  RelayContext& context_;
  TunnelTable table_;
  StatusStore statusStore_;  // the origins' `status` reports (docs/pools-status.md)
  std::unique_ptr<ControlClient> control_;
  ApiProxy apiProxy_;
  AttachGuard attachGuard_;
  RelayHealth health_;
  tls::SslCtxPtr apiContext_;
  std::string apiFingerprint_;
  std::unordered_map<uint64_t, BridgeSession*> bridges_;
  uint64_t nextBridgeKey_ = 1;
  uint64_t bridgeIdPrefix_ = 0;
  std::vector<uint64_t> drainQueue_;
  size_t drainPerStep_ = 0;  // set by startDrain from the whole queue
  uv_timer_t drainTimer_{};
  bool drainTimerOpen_ = false;
  uv_timer_t cacheTimer_{};  // sweepCache every kCacheSweepMs
  bool cacheTimerOpen_ = false;
  // Bumped by every RecheckRecords: a "no such tunnel" answer to a FetchTunnel sent before it may
  // predate a creation whose event was lost, so it is not cached.
  uint64_t recheckGeneration_ = 0;
  // The upgrades waiting for one tunnel's FetchTunnel: a reconnect storm brings a tunnel's
  // bridges back at once, before its record is cached, and each would otherwise make its own
  // call (a gRPC round trip and a thread hop on relayd's side, a store read on controld's).
  struct PendingFetch {
    uint64_t generation = 0;  // recheckGeneration_ when it was sent: later upgrades do not join
    uint64_t sentAtMs = 0;    // nor after kFetchJoinMs (its answer is due within callTimeoutMs)
    std::vector<std::function<void(UpgradeDecision)>> waiting;
  };
  std::unordered_map<std::string, std::shared_ptr<PendingFetch>> fetching_;
  static constexpr uint64_t kFetchJoinMs = 10'000;
  MeshRouteTable meshRoutes_;
  // route()'s scratch: the mesh's origins for the visitor's route (no allocation per visitor).
  std::vector<std::string_view> remoteOrigins_;
  MeshFeedReceiver meshFeed_{meshRoutes_};
  std::unique_ptr<MeshForwarder> forwarder_;  // null without INTERNAL_ADDRESS
  std::unique_ptr<DirectDialer> direct_;      // direct mode: the origins this relay dials
};

[[nodiscard]] CachedRecord toCachedRecord(const v1::TunnelRecord& record);
[[nodiscard]] v1::DetachReason detachReasonToProto(DetachOutcome reason);
[[nodiscard]] DetachOutcome detachOutcomeFromProto(v1::DetachReason reason);

}  // namespace ot::relayd
