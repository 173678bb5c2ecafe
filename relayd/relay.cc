#include "relayd/relay.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <utility>

#include "common/clock.h"
#include "common/log.h"
#include "common/log_throttle.h"
#include "common/tcp_stream.h"
#include "common/websocket_frame.h"
#include "relayd/api_connection.h"
#include "relayd/attach_checks.h"
#include "relayd/bridge_session.h"
#include "relayd/drain_pace.h"
#include "relayd/inbound_connection.h"
#include "relayd/visitor_analytics.h"
#include "relayd/visitor_stream.h"

namespace ot::relayd {

namespace {

const log::Logger kRelayLog("relayd.relay");

constexpr int kVisitorNotSentLowat = 128 * 1024;
// Sources the attach-failure table remembers at once (about 150 bytes each), and how often one
// source's failures may be logged.
constexpr size_t kAttachFailureSources = 10'000;
constexpr uint64_t kAttachFailureLogEveryMs = 60'000;

SourceFailureLimits attachFailureLimits(const RelaydConfig& config) {
  SourceFailureLimits limits;
  limits.maxFailures = config.authFailureLimit;
  limits.windowMs = config.authFailureWindowMs;
  limits.maxSources = kAttachFailureSources;
  limits.logEveryMs = kAttachFailureLogEveryMs;
  return limits;
}
constexpr uint64_t kRefusedLogEveryMs = 10'000;

VisitorOutcome outcomeFor(PickResult result) {
  switch (result) {
    case PickResult::kOk:
      return VisitorOutcome::kServedLocal;
    case PickResult::kUnknownTunnel:
      return VisitorOutcome::kRejectedUnknownTunnel;
    case PickResult::kCertNotReady:
      return VisitorOutcome::kRejectedCertNotReady;
    case PickResult::kNoBridge:
      return VisitorOutcome::kRejectedNoBridge;
    case PickResult::kUnknownRoute:
      return VisitorOutcome::kRejectedUnknownRoute;
    case PickResult::kTooManyConnections:
      return VisitorOutcome::kRejectedTooManyConnections;
    case PickResult::kRemote:  // forwarded; rejected as "no bridge" only when that fails
      return VisitorOutcome::kRejectedNoBridge;
  }
  return VisitorOutcome::kError;
}

// No bridge here holds the visitor's route: another machine may (a visitor forwarded here is then
// answered 0).
bool noLocalBridge(PickResult result) {
  return result == PickResult::kUnknownTunnel || result == PickResult::kNoBridge ||
         result == PickResult::kUnknownRoute;
}

}  // namespace

Relay::Relay(RelayContext& context, ControlClientOptions controlOptions)
    : context_(context),
      table_(MachineLimits{static_cast<uint32_t>(context.config.maxConnsPerBridge),
                           static_cast<uint32_t>(context.config.maxConnsPerTunnel), 256}),
      // One report per origin with a bridge here: never more than the connections admitted.
      statusStore_(std::max<size_t>(kMaxStatusEntries, context.maxConnections)),
      apiProxy_(context.loop, context.config.apiSocket),
      attachGuard_(attachFailureLimits(context.config)),
      health_(context.config.controlDownGraceMs, context.nowMs()) {
  std::random_device random;
  bridgeIdPrefix_ = (static_cast<uint64_t>(random()) << 32) ^ random();
  ControlEvents events;
  events.onSessionState = [this](bool connected) {
    context_.metrics.controlConnected.Set(connected ? 1 : 0);
    health_.controlSession(connected, context_.nowMs());
    if (connected) context_.metrics.controlSessionsTotal.Increment();
    meshFeed_.sessionChanged();  // the copy stays in use; the new session sends a snapshot
    kRelayLog.info(connected ? "control session up" : "control session down");
    // API requests waiting on controld's socket would wait out the proxy timeout: answer them now.
    if (!connected) apiProxy_.failAll("the control session is down");
  };
  events.onTunnel = [this](const v1::TunnelRecord& record) { onTunnel(record); };
  events.onTunnelDeleted = [this](const v1::TunnelDeleted& deleted) {
    onTunnelDeleted(deleted.tunnel_id());
  };
  events.onApiCertificate = [this](const v1::ApiCertificate& certificate) {
    onApiCertificate(certificate);
  };
  events.onCommand = [this](const v1::Command& command) { onCommand(command); };
  meshFeedEvents(events);
  events.onRecheckRecords = [this](const v1::RecheckRecords& recheck) {
    onRecheckRecords(recheck);
  };
  control_ =
      std::make_unique<ControlClient>(context.loop, std::move(controlOptions), std::move(events));
  uv_timer_init(context.loop, &drainTimer_);
  drainTimer_.data = this;
  drainTimerOpen_ = true;
  uv_timer_init(context.loop, &cacheTimer_);
  cacheTimer_.data = this;
  cacheTimerOpen_ = true;
  if (!context.config.internalAddress.empty()) {
    forwarder_ = std::make_unique<MeshForwarder>(
        context, meshRoutes_,
        MeshForwarderOptions{context.config.identity.machineId, context.config.internalToken,
                             context.config.internalAddress, kForwardAnswerTimeoutMs},
        [this](TcpStream* stream, VisitorOutcome outcome, const std::string& tunnelId) {
          rejectVisitor(stream, outcome, tunnelId);
        });
  }
  DirectDialer::Hooks directHooks;
  directHooks.handOff = [this](TcpStream* stream, uint64_t dialId) {
    InboundConnection::adoptDialed(context_, *this, stream, dialId);
  };
  directHooks.closeBridge = [this](uint64_t bridgeKey) {
    auto it = bridges_.find(bridgeKey);
    if (it != bridges_.end())
      it->second->close(ws::kCloseNormal, DetachOutcome::kServerClose, "direct address changed");
  };
  direct_ = std::make_unique<DirectDialer>(context_, std::move(directHooks));
}

Relay::~Relay() = default;

void Relay::start() {
  control_->start();
  direct_->start();
  uv_timer_start(
      &cacheTimer_, [](uv_timer_t* timer) { static_cast<Relay*>(timer->data)->sweepCache(); },
      kCacheSweepMs, kCacheSweepMs);
}

void Relay::stop() {
  control_->stop();
  direct_->close();
  if (drainTimerOpen_) {
    drainTimerOpen_ = false;
    uv_close(reinterpret_cast<uv_handle_t*>(&drainTimer_), nullptr);
  }
  if (cacheTimerOpen_) {
    cacheTimerOpen_ = false;
    uv_close(reinterpret_cast<uv_handle_t*>(&cacheTimer_), nullptr);
  }
}

// ---------------------------------------------------------------------------------------------
// Upgrades and attaches

void Relay::checkUpgrade(const std::string& tunnelId, std::function<void(UpgradeDecision)> done) {
  if (context_.draining) {
    // Before any lookup: a draining relay would only answer the attach with drain and 1012.
    done(UpgradeDecision::kDraining);
    return;
  }
  if (const CachedRecord* record = table_.record(tunnelId)) {
    done(record->deleted ? UpgradeDecision::kNotFound : UpgradeDecision::kAllowed);
    return;
  }
  if (table_.knownMissing(tunnelId, context_.nowMs())) {
    done(UpgradeDecision::kNotFound);
    return;
  }
  if (!control_->connected()) {
    done(UpgradeDecision::kUnavailable);
    return;
  }
  std::shared_ptr<PendingFetch>& slot = fetching_[tunnelId];
  const uint64_t nowMs = context_.nowMs();
  if (slot != nullptr && slot->generation == recheckGeneration_ &&
      nowMs - slot->sentAtMs < kFetchJoinMs) {
    slot->waiting.push_back(std::move(done));
    context_.metrics.recordFetchesJoined.Increment();
    return;
  }
  // None in flight, or one sent before a RecheckRecords (its "not found" may be stale), or one
  // whose answer is long overdue: a new fetch, which the upgrades after this one join.
  slot = std::make_shared<PendingFetch>();
  slot->generation = recheckGeneration_;
  slot->sentAtMs = nowMs;
  slot->waiting.push_back(std::move(done));
  context_.metrics.recordFetchesSent.Increment();
  control_->fetchTunnel(
      tunnelId, [this, tunnelId, pending = slot](Result<v1::FetchTunnelResponse> result) {
        if (auto found = fetching_.find(tunnelId);
            found != fetching_.end() && found->second == pending) {
          fetching_.erase(found);
        }
        const UpgradeDecision decision = fetchedDecision(tunnelId, pending->generation, result);
        // Moved out first: a waiter's answer may start another upgrade of the same tunnel.
        const auto waiting = std::move(pending->waiting);
        for (const auto& answer : waiting) answer(decision);
      });
}

Relay::UpgradeDecision Relay::fetchedDecision(const std::string& tunnelId, uint64_t generation,
                                              const Result<v1::FetchTunnelResponse>& result) {
  if (!result.ok()) return UpgradeDecision::kUnavailable;
  if (!result->found()) {
    if (generation == recheckGeneration_) table_.markMissing(tunnelId, context_.nowMs());
    return UpgradeDecision::kNotFound;
  }
  table_.upsertRecord(tunnelId, toCachedRecord(result->record()));
  direct_->onRecord(result->record());
  const CachedRecord* record = table_.record(tunnelId);
  return record == nullptr || record->deleted ? UpgradeDecision::kNotFound
                                              : UpgradeDecision::kAllowed;
}

// A mesh link came up on controld's side: events its peer sent meanwhile are lost, so neither a
// "no such tunnel" answer nor a "certificate not ready" record is trusted any longer.
void Relay::onRecheckRecords(const v1::RecheckRecords& recheck) {
  ++recheckGeneration_;
  const std::vector<std::string> reread = table_.recheckNegative();
  for (const auto& id : reread) rereadRecord(id);
  kRelayLog.info("cached records rechecked: a mesh link came up",
                 {{"peer", recheck.peer_machine_id()}, {"reread", reread.size()}});
}

void Relay::sweepCache() {
  // While controld is away the cached copies are all there is (an attach is authorized from
  // them): nothing is dropped then.
  const TunnelTable::Sweep swept = table_.sweep(context_.nowMs(), control_->connected());
  for (const auto& id : swept.reread) rereadRecord(id);
  if (swept.dropped > 0) {
    kRelayLog.debug("idle cached records dropped", {{"dropped", swept.dropped}});
  }
}

// A record of a tunnel with a bridge here read again; what controld answers replaces it (a
// revision below the cached one changes nothing). Not found: controld's deletion push decides.
void Relay::rereadRecord(const std::string& tunnelId) {
  if (!control_->connected()) return;  // the cached copy is used while controld is away
  control_->fetchTunnel(tunnelId, [this, tunnelId](Result<v1::FetchTunnelResponse> result) {
    if (result.ok() && result->found()) {
      table_.upsertRecord(tunnelId, toCachedRecord(result->record()));
      direct_->onRecord(result->record());
    }
  });
}

uint64_t Relay::registerBridge(BridgeSession* bridge) {
  const uint64_t key = nextBridgeKey_++;
  bridges_.emplace(key, bridge);
  return key;
}

void Relay::unregisterBridge(uint64_t key) {
  bridges_.erase(key);
}

std::string Relay::newBridgeId(uint64_t key) const {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = "br_";
  for (int shift = 60; shift >= 32; shift -= 4)
    id.push_back(kHex[(bridgeIdPrefix_ >> shift) & 0xF]);
  id.push_back('_');
  id += std::to_string(key);
  return id;
}

void Relay::authorizeAttach(BridgeSession* bridge) {
  const uint64_t key = bridge->key();
  // Before any token is looked at: a source past its failures waits out its window.
  if (const std::optional<uint64_t> waitMs =
          attachGuard_.refuse(bridge->peerAddress(), context_.nowMs())) {
    context_.metrics.attach(AttachOutcome::kTooManyFailures);
    bridge->attachRefused(bridge::AttachErrorCode::kTooManyFailures,
                          "too many failed attaches from this address; retry in " +
                              std::to_string((*waitMs + 999) / 1000) + " s");
    return;
  }
  if (!control_->connected()) {
    authorizeFromCache(key);
    return;
  }
  const bridge::AttachRequest& attach = bridge->attachRequest();
  v1::AuthorizeAttachRequest request;
  request.set_tunnel_id(bridge->tunnelId());
  request.set_token(attach.token);
  // Invalid routes are not sent: controld checks the token, and controlVerdict answers
  // invalid_route once it matched (attach_checks.h).
  for (const auto& route : attach.routes) request.add_routes(route);
  request.set_origin(attach.origin);
  request.set_profile(attach.profile);
  request.set_bridge_id(bridge->bridgeId());
  request.set_max_conns(attach.maxConns);
  control_->authorizeAttach(std::move(request),
                            [this, key](Result<v1::AuthorizeAttachResponse> result) {
                              if (!result.ok()) {
                                // controld went away meanwhile: the cached record decides, as while
                                // it is down.
                                authorizeFromCache(key);
                                return;
                              }
                              finishAttach(key, &result.value());
                            });
}

void Relay::attachFailed(const BridgeSession& bridge) {
  attachGuard_.failed(bridge.peerAddress(), bridge.tunnelId(), context_.nowMs());
}

void Relay::authorizeFromCache(uint64_t key) {
  auto it = bridges_.find(key);
  if (it == bridges_.end()) return;
  BridgeSession* bridge = it->second;
  if (auto refused =
          checkCachedAttach(table_.record(bridge->tunnelId()), bridge->attachRequest())) {
    context_.metrics.attach(refused->outcome);
    bridge->attachRefused(refused->code, refused->message);
    return;
  }
  finishAttach(key, nullptr);
}

void Relay::finishAttach(uint64_t key, const v1::AuthorizeAttachResponse* response) {
  auto it = bridges_.find(key);
  if (it == bridges_.end()) return;
  BridgeSession* bridge = it->second;
  if (response != nullptr) {
    ControlVerdict verdict = controlVerdict(*response, bridge->attachRequest());
    if (verdict.kind == ControlVerdict::Kind::kUseCache) {
      authorizeFromCache(key);
      return;
    }
    if (verdict.kind == ControlVerdict::Kind::kRefused) {
      context_.metrics.attach(verdict.refusal.outcome);
      bridge->attachRefused(verdict.refusal.code, verdict.refusal.message);
      return;
    }
    if (response->has_record()) storeRecord(response->record());
  }
  if (table_.bridgeCountOf(bridge->tunnelId()) >= context_.config.maxBridgesPerTunnel) {
    // One token holder must not take the relay's whole connection budget with bridges.
    context_.metrics.attach(AttachOutcome::kTooManyBridges);
    bridge->attachRefused(bridge::AttachErrorCode::kTooManyBridges,
                          "the tunnel has reached its limit of " +
                              std::to_string(context_.config.maxBridgesPerTunnel) +
                              " bridges on this relay");
    return;
  }
  const bridge::AttachRequest& attach = bridge->attachRequest();
  if (!table_.routesFit(bridge->tunnelId(), attach.routes)) {
    context_.metrics.attach(AttachOutcome::kTooManyRoutes);
    bridge->attachRefused(bridge::AttachErrorCode::kTooManyRoutes,
                          "the tunnel would hold more than 256 routes on this relay");
    return;
  }
  if (const uint64_t dialId = bridge->directDialId();
      dialId != 0 && !direct_->dialAttached(dialId, key, bridge->tunnelId(), attach.origin)) {
    // Our own dial, no longer wanted (its target changed or went, or it ran past its deadline),
    // or an origin other than the one dialed answered: not one of the target's links.
    context_.metrics.attach(AttachOutcome::kError);
    bridge->attachRefused(bridge::AttachErrorCode::kError,
                          "this relay no longer dials this origin at this address");
    return;
  }
  bridge->attachAllowed(table_.bridgeConnLimit(bridge->tunnelId(), attach.maxConns));
}

void Relay::bridgeAttached(BridgeSession* bridge) {
  const bridge::AttachRequest& attach = bridge->attachRequest();
  // The token is still there (BridgeSession drops it after this call): which credential it was.
  table_.addBridge(bridge->tunnelId(), bridge->key(), attach.routes, bridge->maxConns(),
                   TunnelTable::classifyAttach(table_.record(bridge->tunnelId()), attach.token,
                                               attach.origin, attach.profile, attach.profileIndex),
                   context_.nowMs());
  context_.metrics.bridgesAttached.Increment();
  v1::Bridge proto;
  proto.set_bridge_id(bridge->bridgeId());
  proto.set_tunnel_id(bridge->tunnelId());
  for (const auto& route : attach.routes) proto.add_routes(route);
  proto.set_origin(attach.origin);
  proto.set_profile(attach.profile);
  proto.set_profile_index(attach.profileIndex);
  proto.set_max_conns(bridge->maxConns());
  proto.set_attached_at_unix_ms(static_cast<int64_t>(bridge->attachedAtUnixMs()));
  control_->bridgeAttached(std::move(proto));
  kRelayLog.debug("bridge attached",
                  {{"bridge", bridge->bridgeId()}, {"tunnel", bridge->tunnelId()}});
}

void Relay::bridgeDetached(BridgeSession* bridge, DetachOutcome reason) {
  statusStore_.forget(bridge->tunnelId(), bridge->attachRequest().origin, bridge->key(),
                      bridge->statusEntry());
  table_.removeBridge(bridge->tunnelId(), bridge->key(), context_.nowMs());
  context_.metrics.bridgesAttached.Decrement();
  context_.metrics.detach(reason);
  control_->bridgeDetached(bridge->bridgeId(), bridge->tunnelId(), detachReasonToProto(reason),
                           unixNowMs());
  kRelayLog.debug("bridge detached",
                  {{"bridge", bridge->bridgeId()}, {"reason", detachOutcomeName(reason)}});
}

void Relay::bridgeStatus(BridgeSession* bridge, std::string_view text) {
  const std::string& origin = bridge->attachRequest().origin;
  const uint64_t now = context_.nowMs();
  if (statusStore_.touch(bridge->tunnelId(), origin, bridge->key(), text, now,
                         bridge->statusEntry()))
    return;
  auto report = bridge::parseAttachedClientMessage(text);
  if (report.ok())
    (void)statusStore_.record(bridge->tunnelId(), origin, bridge->key(), std::move(report).value(),
                              text, now, bridge->statusEntry());
}

void Relay::streamClosed(const std::string& tunnelId, uint64_t bridgeKey, const std::string& origin,
                         uint64_t bytesIn, uint64_t bytesOut) {
  table_.connectionClosed(tunnelId, bridgeKey);
  control_->addUsage(tunnelId, bytesIn, bytesOut, 1, 0, origin);
}

// ---------------------------------------------------------------------------------------------
// Visitors

void Relay::routeVisitor(TcpStream* stream, const SniTarget& target, std::vector<uint8_t> hello) {
  (void)route(stream, target, std::move(hello), nullptr);
}

ForwardedRoute Relay::routeForwarded(TcpStream* stream, const SniTarget& target,
                                     std::vector<uint8_t> hello,
                                     const std::function<bool()>& accept, std::string_view origin) {
  return route(stream, target, std::move(hello), &accept, origin);
}

ForwardedRoute Relay::route(TcpStream* stream, const SniTarget& target, std::vector<uint8_t> hello,
                            const std::function<bool()>* forwardedAccept,
                            std::string_view forwardedOrigin) {
  // One address may hold MAX_CONNS_PER_TUNNEL_PER_SOURCE of a tunnel's slots, so a flood of
  // unfinished handshakes from one place leaves the rest to everyone else.
  SourceSlot sourceSlot;
  // The visitor's identity for the origin choice too (IPv4 address, IPv6 /64; a forwarded
  // visitor keeps its own address, so every machine chooses alike).
  const std::string source = peerSourceKey(stream->peerAddress());
  if (!source.empty()) {
    sourceSlot = SourceSlot::acquire(context_.tunnelSlotsBySource, target.tunnelId + ' ' + source,
                                     context_.config.maxConnsPerTunnelPerSource);
    if (!sourceSlot.held()) {
      static LogThrottle throttle(kRefusedLogEveryMs);
      if (uint64_t suppressed = 0; throttle.allow(context_.nowMs(), suppressed)) {
        kRelayLog.warn("visitor refused: its address holds its share of the tunnel's connections",
                       {{"tunnel", target.tunnelId},
                        {"source", source},
                        {"limit", context_.config.maxConnsPerTunnelPerSource},
                        {"suppressed", suppressed}});
      }
      rejectVisitor(stream, VisitorOutcome::kRejectedSourceLimit, target.tunnelId);
      return ForwardedRoute::kRejected;
    }
  }
  // The origin is chosen over this machine's origins and the mesh's (docs/pools-mesh.md); a
  // forwarded visitor is never forwarded again, so it looks at this machine's only.
  PickOptions options;
  remoteOrigins_.clear();
  if (forwardedAccept != nullptr) {
    options.origin = forwardedOrigin;
  } else if (forwarder_ != nullptr && forwarder_->enabled()) {
    meshRoutes_.originsOf(target.tunnelId, target.route, remoteOrigins_);
    options.remoteOrigins = remoteOrigins_;
  }
  // Idle bridges' receives the kernel still holds (an EOF among them) are finished first, so a
  // bridge whose client has just gone is not chosen (docs/relayd.md "io_uring for idle bridges").
  if (context_.ring) context_.ring->catchUp();
  const TunnelTable::Pick pick =
      table_.pickBridge(target.tunnelId, target.route, source, context_.nowMs(), options);
  if (pick.result == PickResult::kRemote) {
    // Another machine holds the chosen origin's links: forwarded there, naming the origin.
    if (forwarder_->forward(stream, target.tunnelId, target.route, std::move(hello),
                            std::move(sourceSlot), VisitorOutcome::kRejectedNoBridge, source,
                            std::optional<std::string_view>(pick.remoteOrigin))) {
      return ForwardedRoute::kServed;
    }
    rejectVisitor(stream, VisitorOutcome::kRejectedNoBridge, target.tunnelId);
    return ForwardedRoute::kRejected;
  }
  if (pick.result != PickResult::kOk) {
    const VisitorOutcome outcome = outcomeFor(pick.result);
    // A certificate "not ready" in this machine's cached record decides nothing when no bridge
    // here holds the tunnel: the holder checks its own (fresher) record.
    if (noLocalBridge(pick.result) ||
        (pick.result == PickResult::kCertNotReady && table_.bridgeCountOf(target.tunnelId) == 0)) {
      if (forwardedAccept != nullptr) {
        // Forwarded here: never forwarded again. The caller answers 0 and closes.
        context_.metrics.visitor(outcome);
        return ForwardedRoute::kNoBridge;
      }
      if (forwarder_ != nullptr &&
          forwarder_->forward(stream, target.tunnelId, target.route, std::move(hello),
                              std::move(sourceSlot), outcome, source)) {
        return ForwardedRoute::kServed;
      }
    }
    rejectVisitor(stream, outcome, target.tunnelId);
    return ForwardedRoute::kRejected;
  }
  auto it = bridges_.find(pick.bridgeKey);
  if (it == bridges_.end()) {
    table_.connectionClosed(target.tunnelId, pick.bridgeKey);
    rejectVisitor(stream, VisitorOutcome::kError, target.tunnelId);
    return ForwardedRoute::kRejected;
  }
  if (forwardedAccept != nullptr && !(*forwardedAccept)()) {
    table_.connectionClosed(target.tunnelId, pick.bridgeKey);
    rejectVisitor(stream, VisitorOutcome::kError, target.tunnelId);
    return ForwardedRoute::kRejected;
  }
  BridgeSession* bridge = it->second;
  stream->setNotSentLowat(kVisitorNotSentLowat);
  auto* visitor =
      new VisitorStream(context_, stream, target.tunnelId, bridge->attachRequest().window);
  visitor->holdSourceSlot(std::move(sourceSlot));
  if (forwardedAccept != nullptr) visitor->markForwardedIn();
  if (!bridge->openStream(visitor, target.route, stream->peer().toString(), std::move(hello))) {
    table_.connectionClosed(target.tunnelId, pick.bridgeKey);
    context_.metrics.visitor(VisitorOutcome::kError);
    visitor->abort(bridge::ResetReason::kUnspecified, false);
    return ForwardedRoute::kRejected;
  }
  context_.metrics.visitor(forwardedAccept != nullptr ? VisitorOutcome::kForwardedIn
                                                      : VisitorOutcome::kServedLocal);
  return ForwardedRoute::kServed;
}

void Relay::rejectVisitor(TcpStream* stream, VisitorOutcome outcome, const std::string& tunnelId) {
  context_.metrics.visitor(outcome);
  emitVisitorOutcome(context_, tunnelId, outcome);
  if (outcome != VisitorOutcome::kRejectedUnknownTunnel) control_->addUsage(tunnelId, 0, 0, 0, 1);
  if (context_.openConnections > 0) --context_.openConnections;
  stream->setHandler(nullptr);
  stream->close(false);
}

// ---------------------------------------------------------------------------------------------
// Draining

void Relay::startDrain() {
  if (context_.draining) return;
  context_.draining = true;
  direct_->stop();  // no new dials; the bridges drain as every other
  control_->draining(unixNowMs() + static_cast<int64_t>(context_.config.shutdownDrainMs));
  drainQueue_.clear();
  for (const auto& [key, bridge] : bridges_) drainQueue_.push_back(key);
  kRelayLog.info("draining", {{"bridges", std::to_string(drainQueue_.size())},
                              {"api_connections", std::to_string(context_.apiConnections.size())}});
  // Idle keep-alive API connections close now (h2: GOAWAY), so a proxy in front moves its pooled
  // connections elsewhere; busy ones close after their answer (Connection: close).
  const std::vector<ApiConnection*> apiConnections(context_.apiConnections.begin(),
                                                   context_.apiConnections.end());
  for (ApiConnection* connection : apiConnections) {
    if (context_.apiConnections.count(connection) != 0) connection->onDrainStarted();
  }
  // Spread: 5,000 a second, and all of them within 5 s however many there are (drain_pace.h).
  drainPerStep_ = drainPerStep(drainQueue_.size());
  drainStep();
}

void Relay::stopDrain() {
  if (!context_.draining) return;
  context_.draining = false;
  drainQueue_.clear();
  direct_->start();
  control_->serving();
  kRelayLog.info("serving again after a drain");
}

void Relay::drainStep() {
  size_t done = 0;
  while (!drainQueue_.empty() && done < drainPerStep_) {
    const uint64_t key = drainQueue_.back();
    drainQueue_.pop_back();
    auto it = bridges_.find(key);
    if (it == bridges_.end()) continue;
    it->second->drain();
    ++done;
  }
  if (!drainQueue_.empty() && drainTimerOpen_)
    uv_timer_start(&drainTimer_, onDrainTimer, kDrainStepMs, 0);
}

void Relay::onDrainTimer(uv_timer_t* handle) {
  static_cast<Relay*>(handle->data)->drainStep();
}

void Relay::closeAllBridges() {
  std::vector<BridgeSession*> all;
  all.reserve(bridges_.size());
  for (const auto& [key, bridge] : bridges_) all.push_back(bridge);
  for (BridgeSession* bridge : all) bridge->close(ws::kCloseServiceRestart, DetachOutcome::kDrain);
}

}  // namespace ot::relayd
